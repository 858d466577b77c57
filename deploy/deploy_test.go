package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// stopMargin is the least time a supervisor (Kubernetes, systemd, Docker)
// must allow beyond the worker's shutdown grace before it kills: for the
// cancelled jobs to return and be recorded, the leader to resign and the
// admin server to close.
const stopMargin = 10 * time.Second

// The non-root user of the image (distroless's nonroot), which the
// manifests run as.
const imageUID = 65532

// promtool checks the rules and runs their fixtures, and checks the
// Prometheus configuration that loads them.
func TestPrometheus_Promtool(t *testing.T) {
	t.Parallel()
	promtool := requireTool(t, "promtool", "prometheus")
	dir := "prometheus"

	out, code := run(t, dir, promtool, "check", "rules", "alerts.yml")
	require.Zero(t, code, "promtool check rules:\n%s", out)
	require.Contains(t, out, "SUCCESS")

	out, code = run(t, dir, promtool, "test", "rules", "alerts_test.yml")
	require.Zero(t, code, "promtool test rules:\n%s", out)
	require.Contains(t, out, "SUCCESS")

	// Every alert has fixtures that fire it.
	tests, err := os.ReadFile(filepath.Join(dir, "alerts_test.yml"))
	require.NoError(t, err)
	for _, name := range alertNames(t) {
		require.Regexp(t, `alertname: `+name+`\n\s+exp_alerts:\n\s+- exp_labels:`, string(tests), "no fixture fires %s", name)
	}

	// check config needs the token file to exist: a copy points at one.
	tmp := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join(dir, "prometheus.yml"))
	require.NoError(t, err)
	token := filepath.Join(tmp, "token")
	require.NoError(t, os.WriteFile(token, []byte("t"), 0o600))
	re := regexp.MustCompile(`(?m)^(\s*credentials_file:).*$`)
	require.True(t, re.Match(cfg), "prometheus.yml has no credentials_file")
	cfg = re.ReplaceAll(cfg, []byte("${1} "+token))
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "prometheus.yml"), cfg, 0o644))
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "alerts.yml"), rules, 0o644))
	out, code = run(t, tmp, promtool, "check", "config", "prometheus.yml")
	require.Zero(t, code, "promtool check config:\n%s", out)
	require.Contains(t, out, "SUCCESS")

	// A broken rule fails: the check is not vacuous.
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "broken.yml"),
		[]byte("groups:\n  - name: x\n    rules:\n      - alert: X\n        expr: sum(\n"), 0o644))
	out, code = run(t, tmp, promtool, "check", "rules", "broken.yml")
	require.NotZero(t, code, "promtool accepted a broken rule:\n%s", out)
}

// alertNames are the alerts of alerts.yml.
func alertNames(t *testing.T) []string {
	t.Helper()
	var names []string
	for _, g := range list(t, readYAML(t, "prometheus/alerts.yml")[0], "groups") {
		for _, r := range list(t, g, "rules") {
			names = append(names, str(t, r, "alert"))
		}
	}
	require.NotEmpty(t, names)
	return names
}

// The alerts cover what the issue names an operator must be woken for.
func TestPrometheus_AlertsCoverTheCases(t *testing.T) {
	t.Parallel()
	rules := map[string]string{}
	for _, g := range list(t, readYAML(t, "prometheus/alerts.yml")[0], "groups") {
		for _, r := range list(t, g, "rules") {
			rules[str(t, r, "alert")] = str(t, r, "expr")
			sev := str(t, r, "labels", "severity")
			require.Contains(t, []string{"page", "warning"}, sev)
			require.NotEmpty(t, str(t, r, "annotations", "summary"))
			require.NotEmpty(t, str(t, r, "annotations", "description"))
		}
	}
	for alert, metric := range map[string]string{
		"FerryNoLeader":                "ferry_election_is_leader",
		"FerryScheduleLate":            "ferry_schedule_last_tick_age_seconds",
		"FerryOutboxDeliveriesStuck":   "ferry_outbox_deliveries",
		"FerryOutboxMessagesStuck":     "ferry_outbox_messages",
		"FerryOutboxDeliveriesFailing": "ferry_job_duration_seconds_count",
		"FerryQueueFull":               "ferry_queue_full_total",
		"FerryJobsRescued":             "ferry_jobs_rescued_total",
		"FerryJobsDiscardedByRescue":   "ferry_jobs_rescued_total",
	} {
		require.Contains(t, rules, alert)
		require.Contains(t, rules[alert], metric, alert)
	}
}

// The Kubernetes scrape job keeps the Deployment's pods, on its admin port.
func TestPrometheus_KubernetesScrapeMatchesDeployment(t *testing.T) {
	t.Parallel()
	k := loadK8s(t)
	dep := k.get(t, "Deployment", "ferry-worker")
	labels := at(t, dep, "spec", "template", "metadata", "labels").(map[string]any)
	ports := containerPorts(t, at(t, dep, "spec", "template", "spec", "containers", 0))

	job := at(t, readYAML(t, "prometheus/kubernetes.yml")[0], "scrape_configs", 0)
	require.Equal(t, "/metrics", str(t, job, "metrics_path"))
	require.Equal(t, "Bearer", str(t, job, "authorization", "type"))
	require.NotEmpty(t, str(t, job, "authorization", "credentials_file"))
	var kept bool
	for _, rc := range list(t, job, "relabel_configs") {
		m := rc.(map[string]any)
		if m["action"] != "keep" {
			continue
		}
		kept = true
		var values []string
		for _, l := range strs(t, rc, "source_labels") {
			switch {
			case strings.HasPrefix(l, "__meta_kubernetes_pod_label_"):
				name := strings.TrimPrefix(l, "__meta_kubernetes_pod_label_")
				var v string
				for k, lv := range labels {
					if sanitizeLabel(k) == name {
						v = lv.(string)
					}
				}
				require.NotEmpty(t, v, "the pods have no label for %s", l)
				values = append(values, v)
			case l == "__meta_kubernetes_pod_container_port_name":
				var name string
				for n, p := range ports {
					if p == 9090 {
						name = n
					}
				}
				values = append(values, name)
			default:
				t.Fatalf("unexpected source label %s", l)
			}
		}
		require.Regexp(t, "^(?:"+str(t, rc, "regex")+")$", strings.Join(values, ";"), "the keep rule does not keep the Deployment's pods")
	}
	require.True(t, kept, "no keep rule")
}

// sanitizeLabel is a Kubernetes label name as Prometheus's service
// discovery names it.
func sanitizeLabel(s string) string {
	return regexp.MustCompile(`[^a-zA-Z0-9_]`).ReplaceAllString(s, "_")
}

// k8s is the manifests of k8s/, by kind and name.
type k8s struct {
	docs map[string]map[string]any // "Kind/name"
	kust map[string]any
}

func loadK8s(t *testing.T) k8s {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	require.NoError(t, err)
	k := k8s{docs: map[string]map[string]any{}}
	for _, f := range files {
		for _, d := range readYAML(t, f) {
			if filepath.Base(f) == "kustomization.yaml" {
				k.kust = d
				continue
			}
			key := str(t, d, "kind") + "/" + str(t, d, "metadata", "name")
			require.NotContains(t, k.docs, key, "%s twice", key)
			k.docs[key] = d
		}
	}
	require.NotNil(t, k.kust, "k8s/kustomization.yaml")
	return k
}

func (k k8s) get(t *testing.T, kind, name string) map[string]any {
	t.Helper()
	d, ok := k.docs[kind+"/"+name]
	require.True(t, ok, "no %s %s in k8s/", kind, name)
	return d
}

// containerPorts maps a container's port names to numbers.
func containerPorts(t *testing.T, container any) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, p := range list(t, container, "ports") {
		out[str(t, p, "name")] = at(t, p, "containerPort").(int)
	}
	return out
}

// containerEnv returns a container's environment: literal values, and for
// secretKeyRef and configMapKeyRef the reference ("secret:NAME/KEY"),
// which must exist among the manifests (the Secret in
// secret.example.yaml).
func containerEnv(t *testing.T, k k8s, container any) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range list(t, container, "env") {
		name := str(t, e, "name")
		require.NotContains(t, env, name, "%s twice", name)
		m := e.(map[string]any)
		if v, ok := m["value"]; ok {
			env[name] = v.(string)
			continue
		}
		for ref, kind := range map[string]string{"secretKeyRef": "Secret", "configMapKeyRef": "ConfigMap"} {
			r, ok := at(t, e, "valueFrom").(map[string]any)[ref]
			if !ok {
				continue
			}
			obj, key := str(t, r, "name"), str(t, r, "key")
			data, _ := k.get(t, kind, obj)["stringData"].(map[string]any)
			if kind == "ConfigMap" {
				data, _ = k.get(t, kind, obj)["data"].(map[string]any)
			}
			require.Contains(t, data, key, "%s: %s %s has no key %s", name, kind, obj, key)
			env[name] = strings.ToLower(kind) + ":" + obj + "/" + key
		}
		require.Contains(t, env, name, "%s: neither a value nor a key reference", name)
	}
	return env
}

func requirePodSecurity(t *testing.T, where string, pod, container any) {
	t.Helper()
	require.Equal(t, true, at(t, pod, "securityContext", "runAsNonRoot"), where)
	require.Equal(t, imageUID, at(t, pod, "securityContext", "runAsUser"), where)
	require.Equal(t, false, at(t, container, "securityContext", "allowPrivilegeEscalation"), where)
	require.Equal(t, true, at(t, container, "securityContext", "readOnlyRootFilesystem"), where)
	require.Equal(t, []string{"ALL"}, strs(t, container, "securityContext", "capabilities", "drop"), where)
}

func TestKubernetes_Manifests(t *testing.T) {
	t.Parallel()
	k := loadK8s(t)
	worker := apps()["worker"]

	// kustomization.yaml lists files that exist and parse; the Secret
	// (an example) and the Job (applied on its own) are left out.
	resources := strs(t, k.kust, "resources")
	for _, r := range resources {
		require.FileExists(t, filepath.Join("k8s", r))
	}
	require.NotContains(t, resources, "secret.example.yaml")
	require.NotContains(t, resources, "migrate-job.yaml")

	dep := k.get(t, "Deployment", "ferry-worker")
	pod := at(t, dep, "spec", "template", "spec")
	podLabels := at(t, dep, "spec", "template", "metadata", "labels").(map[string]any)
	require.Equal(t, at(t, dep, "spec", "selector", "matchLabels"), subset(podLabels, at(t, dep, "spec", "selector", "matchLabels")))
	containers := list(t, pod, "containers")
	require.Len(t, containers, 1)
	c := containers[0]
	requirePodSecurity(t, "Deployment", pod, c)

	// The command and its environment are the CLI's.
	args := strs(t, c, "args")
	workerRun := findCommand(t, worker, args...)
	require.Equal(t, []string{"run"}, workerRun.path)
	env := containerEnv(t, k, c)
	requireEnvDeclared(t, "Deployment", workerRun, env)
	require.Equal(t, "secret:ferry/database-url", env["DATABASE_URL"])
	require.Equal(t, "secret:ferry/admin-token", env["FERRY_ADMIN_TOKEN"])

	// The admin server listens where the probes look, and may: a
	// non-loopback address has the token.
	addr := env["FERRY_ADMIN_ADDR"]
	require.NoError(t, admin.ValidateAddr(addr, env["FERRY_ADMIN_TOKEN"]))
	require.Error(t, admin.ValidateAddr(addr, ""), "the pod's admin address is reachable from outside: without the token it must be refused")
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	ports := containerPorts(t, c)
	require.Equal(t, port, strconv.Itoa(ports["admin"]), "FERRY_ADMIN_ADDR's port is the container's admin port")
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		require.Equal(t, path, str(t, c, probe, "httpGet", "path"), probe)
		p := at(t, c, probe, "httpGet", "port")
		if name, ok := p.(string); ok {
			require.Contains(t, ports, name, "%s port", probe)
		} else {
			require.Equal(t, ports["admin"], p, "%s port", probe)
		}
		_, hasHeaders := at(t, c, probe, "httpGet").(map[string]any)["httpHeaders"]
		require.False(t, hasHeaders, "%s: the probe needs no header (and could not read a Secret for one)", probe)
	}
	// readyz bounds its check at 3s: the probe waits longer.
	require.Greater(t, at(t, c, "readinessProbe", "timeoutSeconds"), 3)

	// The kubelet's SIGKILL comes after the worker's grace.
	grace := shutdownGrace(t, workerRun, env)
	term := time.Duration(at(t, pod, "terminationGracePeriodSeconds").(int)) * time.Second
	require.GreaterOrEqual(t, term, grace+stopMargin, "terminationGracePeriodSeconds %s against FERRY_SHUTDOWN_GRACE %s", term, grace)

	// FERRY_CONFIG is the ConfigMap's file, mounted.
	cfgPath := env["FERRY_CONFIG"]
	require.NotEmpty(t, cfgPath)
	var mounted bool
	for _, m := range list(t, c, "volumeMounts") {
		if filepath.Dir(cfgPath) != str(t, m, "mountPath") {
			continue
		}
		for _, v := range list(t, pod, "volumes") {
			if str(t, v, "name") == str(t, m, "name") {
				cm := k.get(t, "ConfigMap", str(t, v, "configMap", "name"))
				require.Contains(t, at(t, cm, "data"), filepath.Base(cfgPath))
				mounted = true
			}
		}
	}
	require.True(t, mounted, "FERRY_CONFIG %s is not a mounted ConfigMap key", cfgPath)

	// The PodDisruptionBudget and the Service select the workers; the
	// budget leaves one running.
	pdb := k.get(t, "PodDisruptionBudget", "ferry-worker")
	require.Equal(t, at(t, pdb, "spec", "selector", "matchLabels"), subset(podLabels, at(t, pdb, "spec", "selector", "matchLabels")))
	require.GreaterOrEqual(t, at(t, pdb, "spec", "minAvailable"), 1)
	require.Less(t, at(t, pdb, "spec", "minAvailable"), at(t, dep, "spec", "replicas"), "the budget must allow a disruption")
	svc := k.get(t, "Service", "ferry-admin")
	require.Equal(t, at(t, svc, "spec", "selector"), subset(podLabels, at(t, svc, "spec", "selector")))
	require.Contains(t, ports, str(t, svc, "spec", "ports", 0, "targetPort"))

	// The migration Job runs `worker migrate up` with the database URL.
	job := k.get(t, "Job", "ferry-migrate")
	jpod := at(t, job, "spec", "template", "spec")
	jc := at(t, jpod, "containers", 0)
	requirePodSecurity(t, "Job", jpod, jc)
	migrate := findCommand(t, worker, strs(t, jc, "args")...)
	require.Equal(t, []string{"migrate", "up"}, migrate.path)
	jenv := containerEnv(t, k, jc)
	requireEnvDeclared(t, "Job", migrate, jenv)
	require.Equal(t, env["DATABASE_URL"], jenv["DATABASE_URL"])
	require.Contains(t, []string{"Never", "OnFailure"}, str(t, jpod, "restartPolicy"))
	require.Equal(t, str(t, c, "image"), str(t, jc, "image"), "the Job migrates to the workers' build")
}

// subset returns the entries of m whose keys are in keys (a map): a
// selector matches labels when subset(labels, selector) equals it.
func subset(m map[string]any, keys any) map[string]any {
	out := map[string]any{}
	for k := range keys.(map[string]any) {
		if v, ok := m[k]; ok {
			out[k] = v
		}
	}
	return out
}

// configSecretEnvs are the environment variables a worker config file
// names for its secrets (routes' secret_env, bots' token_env).
func configSecretEnvs(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	doc := readYAML(t, path)[0]
	if o, ok := doc["outbox"].(map[string]any); ok {
		routes, _ := o["routes"].([]any)
		for _, r := range routes {
			if s, ok := r.(map[string]any)["secret_env"].(string); ok {
				out[s] = true
			}
		}
	}
	if tg, ok := doc["telegram"].(map[string]any); ok {
		bots, _ := tg["bots"].([]any)
		for _, b := range bots {
			if s, ok := b.(map[string]any)["token_env"].(string); ok {
				out[s] = true
			}
		}
	}
	return out
}

func TestCompose_File(t *testing.T) {
	t.Parallel()
	worker := apps()["worker"]
	docs := readYAML(t, "docker-compose.yml")
	require.Len(t, docs, 1)
	services := at(t, docs[0], "services").(map[string]any)
	stages := dockerStages(t, "Dockerfile")

	env := func(name string) map[string]string {
		out := map[string]string{}
		for k, v := range at(t, services, name, "environment").(map[string]any) {
			s, ok := v.(string)
			require.True(t, ok, "%s: %s is not a string", name, k)
			out[k] = s
		}
		return out
	}
	requireBuild := func(name, target string) {
		require.Equal(t, "..", str(t, services, name, "build", "context"), name)
		require.Equal(t, "deploy/Dockerfile", str(t, services, name, "build", "dockerfile"), name)
		require.Equal(t, target, str(t, services, name, "build", "target"), name)
		require.Contains(t, stages, target, "%s: no stage %s in the Dockerfile", name, target)
	}

	// Postgres, and the URL every ferry service uses.
	pg := env("postgres")
	dbURL := "postgres://" + pg["POSTGRES_USER"] + ":" + pg["POSTGRES_PASSWORD"] + "@postgres:5432/" + pg["POSTGRES_DB"] + "?sslmode=disable"

	// The migration step: `worker migrate up`, once Postgres is healthy.
	requireBuild("migrate", "ferry")
	migrate := findCommand(t, worker, strs(t, services, "migrate", "command")...)
	require.Equal(t, []string{"migrate", "up"}, migrate.path)
	requireEnvDeclared(t, "compose migrate", migrate, env("migrate"))
	require.Equal(t, dbURL, env("migrate")["DATABASE_URL"])
	require.Equal(t, "service_healthy", str(t, services, "migrate", "depends_on", "postgres", "condition"))

	// The route of the workers' config file reaches the receiver.
	cfgFile := "compose/ferry.yaml"
	route := at(t, readYAML(t, cfgFile)[0], "outbox", "routes", 0)
	routeURL, err := url.Parse(str(t, route, "url"))
	require.NoError(t, err)
	require.Equal(t, "receiver", routeURL.Hostname(), "the route names the receiver's service")
	recv := env("receiver")
	requireBuild("receiver", "demo-receiver")
	recvReads := receiverEnv(t)
	for name := range recv {
		require.True(t, recvReads[name], "receiver: examples/receiver does not read %s", name)
	}
	rhost, rport, err := net.SplitHostPort(recv["DEMO_RECEIVER_ADDR"])
	require.NoError(t, err)
	require.False(t, rhost == "" || net.ParseIP(rhost).IsLoopback() || rhost == "localhost", "the receiver must listen beyond loopback for the workers")
	require.Equal(t, rport, routeURL.Port(), "the route's port is the receiver's")
	require.Contains(t, receiverRoutes(t), "POST "+routeURL.Path, "the receiver serves the route's path")
	secretEnvs := configSecretEnvs(t, cfgFile)
	require.Contains(t, secretEnvs, "DEMO_HOOK_SECRET")

	// Two workers, after the migration, with the config file mounted.
	workerRun := findCommand(t, worker, "run")
	var extra []string
	for e := range secretEnvs {
		extra = append(extra, e)
	}
	for _, name := range []string{"worker-1", "worker-2"} {
		requireBuild(name, "ferry")
		require.Equal(t, workerRun.path, findCommand(t, worker, strs(t, services, name, "command")...).path, name)
		e := env(name)
		requireEnvDeclared(t, "compose "+name, workerRun, e, extra...)
		require.Equal(t, dbURL, e["DATABASE_URL"], name)
		require.Equal(t, recv["DEMO_HOOK_SECRET"], e["DEMO_HOOK_SECRET"], "%s: the receiver checks signatures with the workers' secret", name)
		require.Equal(t, "service_completed_successfully", str(t, services, name, "depends_on", "migrate", "condition"), name)

		var mounted bool
		for _, v := range strs(t, services, name, "volumes") {
			parts := strings.Split(v, ":")
			if parts[1] == e["FERRY_CONFIG"] {
				require.Equal(t, "./"+cfgFile, parts[0])
				mounted = true
			}
		}
		require.True(t, mounted, "%s: FERRY_CONFIG %s is not mounted", name, e["FERRY_CONFIG"])

		// The admin port is published (on the host's loopback), and the
		// address in the container has the token it needs.
		addr := e["FERRY_ADMIN_ADDR"]
		require.NoError(t, admin.ValidateAddr(addr, e["FERRY_ADMIN_TOKEN"]), name)
		_, port, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		published := strs(t, services, name, "ports")
		require.Len(t, published, 1)
		require.True(t, strings.HasPrefix(published[0], "127.0.0.1:"), "%s: publish the admin port on the host's loopback", name)
		require.True(t, strings.HasSuffix(published[0], ":"+port), "%s: %s does not publish %s", name, published[0], port)
		require.Regexp(t, `^\$\{FERRY_ADMIN_TOKEN:\?`, e["FERRY_ADMIN_TOKEN"], "%s: the token is the user's, required, never a default", name)

		// Docker's SIGKILL comes after the worker's grace.
		stop, err := time.ParseDuration(str(t, services, name, "stop_grace_period"))
		require.NoError(t, err)
		grace := shutdownGrace(t, workerRun, e)
		require.GreaterOrEqual(t, stop, grace+stopMargin, "%s: stop_grace_period %s against FERRY_SHUTDOWN_GRACE %s", name, stop, grace)
	}
}

// receiverSource is the demo receiver's main file.
func receiverSource(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "receiver", "main.go"))
	require.NoError(t, err)
	return string(b)
}

// receiverEnv are the environment variables the demo receiver reads.
func receiverEnv(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`os\.(?:Getenv|LookupEnv)\("([A-Z0-9_]+)"\)`).FindAllStringSubmatch(receiverSource(t), -1) {
		out[m[1]] = true
	}
	require.NotEmpty(t, out, "examples/receiver reads no environment variable")
	return out
}

// receiverRoutes are the patterns the demo receiver serves.
func receiverRoutes(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(`HandleFunc\("([^"]+)"`).FindAllStringSubmatch(receiverSource(t), -1) {
		out = append(out, m[1])
	}
	require.NotEmpty(t, out, "examples/receiver serves no route")
	return out
}

func TestSystemd_Unit(t *testing.T) {
	t.Parallel()
	analyze := requireTool(t, "systemd-analyze", "systemd")
	unit, err := os.ReadFile("systemd/ferry-worker.service")
	require.NoError(t, err)
	keys := unitKeys(string(unit))
	worker := apps()["worker"]

	// ExecStart is `worker run`; the environment is the CLI's.
	execStart := strings.Fields(keys["ExecStart"][0])
	require.Equal(t, "/usr/local/bin/worker", execStart[0])
	workerRun := findCommand(t, worker, execStart[1:]...)
	require.Equal(t, []string{"run"}, workerRun.path)
	env := map[string]string{}
	for _, e := range keys["Environment"] {
		name, value, ok := strings.Cut(e, "=")
		require.True(t, ok, "Environment=%s", e)
		env[name] = value
	}
	requireEnvDeclared(t, "ferry-worker.service", workerRun, env)
	example, err := os.ReadFile("systemd/worker.env.example")
	require.NoError(t, err)
	fileEnv := map[string]string{}
	for _, line := range strings.Split(string(example), "\n") {
		line = strings.TrimPrefix(strings.TrimSpace(line), "#")
		if name, value, ok := strings.Cut(line, "="); ok && regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`).MatchString(name) {
			fileEnv[name] = value
		}
	}
	requireEnvDeclared(t, "worker.env.example", workerRun, fileEnv)
	require.Contains(t, fileEnv, "DATABASE_URL")
	require.NoError(t, admin.ValidateAddr(fileEnv["FERRY_ADMIN_ADDR"], fileEnv["FERRY_ADMIN_TOKEN"]))
	require.Equal(t, []string{"/etc/ferry/worker.env"}, keys["EnvironmentFile"])

	// systemd's SIGKILL comes after the worker's grace; a bad config is
	// not restarted in a loop; the service is not root.
	stop, err := time.ParseDuration(keys["TimeoutStopSec"][0] + "s")
	require.NoError(t, err)
	grace := shutdownGrace(t, workerRun, env)
	require.GreaterOrEqual(t, stop, grace+stopMargin, "TimeoutStopSec %s against FERRY_SHUTDOWN_GRACE %s", stop, grace)
	require.Equal(t, []string{"SIGTERM"}, keys["KillSignal"])
	require.Equal(t, []string{"2"}, keys["RestartPreventExitStatus"])
	require.Equal(t, []string{"yes"}, keys["DynamicUser"])

	// systemd-analyze verify, on a copy whose ExecStart is a real worker
	// binary (verify checks that it exists and is executable) and whose
	// EnvironmentFile exists. --man=no: no man pages here to look up.
	bin := proctest.Build(t, "./cmd/worker")["./cmd/worker"]
	tmp := t.TempDir()
	envFile := filepath.Join(tmp, "worker.env")
	require.NoError(t, os.WriteFile(envFile, example, 0o600))
	copyUnit := strings.ReplaceAll(string(unit), "/usr/local/bin/worker", bin)
	copyUnit = strings.ReplaceAll(copyUnit, "/etc/ferry/worker.env", envFile)
	path := filepath.Join(tmp, "ferry-worker.service")
	require.NoError(t, os.WriteFile(path, []byte(copyUnit), 0o644))
	out, code := run(t, "", analyze, "verify", "--man=no", path)
	require.Zero(t, code, "systemd-analyze verify:\n%s", out)
	require.Empty(t, strings.TrimSpace(out), "systemd-analyze verify warned")

	// It does catch a mistake here: the check is not vacuous.
	bad := filepath.Join(tmp, "bad.service")
	require.NoError(t, os.WriteFile(bad, []byte(strings.Replace(copyUnit, "KillMode=", "KilMode=", 1)), 0o644))
	out, _ = run(t, "", analyze, "verify", "--man=no", bad)
	require.Contains(t, out, "Unknown key", "systemd-analyze verify missed an unknown key")
	missing := filepath.Join(tmp, "missing.service")
	require.NoError(t, os.WriteFile(missing, []byte(strings.ReplaceAll(copyUnit, bin, filepath.Join(tmp, "no-such-worker"))), 0o644))
	out, code = run(t, "", analyze, "verify", "--man=no", missing)
	require.NotZero(t, code, "systemd-analyze verify accepted a missing ExecStart:\n%s", out)
}

// unitKeys returns a unit file's values by key, in order.
func unitKeys(unit string) map[string][]string {
	out := map[string][]string{}
	for _, line := range strings.Split(unit, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = append(out[k], v)
		}
	}
	return out
}

// The Grafana dashboard is JSON Grafana can import: panels with a
// Prometheus query each, on the data source variable.
func TestGrafana_Dashboard(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	require.NotEmpty(t, d.UID)
	require.NotEmpty(t, d.Title)
	var queries int
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Title)
		require.Equal(t, "${datasource}", p.Datasource.UID, p.Title)
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			require.Contains(t, tg.Expr, `job=~"$job"`, "%s: %s", p.Title, tg.Expr)
			queries++
		}
	}
	require.Greater(t, queries, 10)
	ids := map[int]bool{}
	for _, p := range d.Panels {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
	}
	require.True(t, slices.ContainsFunc(d.Templating.List, func(v dashVar) bool { return v.Name == "datasource" && v.Type == "datasource" }))
	require.True(t, slices.ContainsFunc(d.Templating.List, func(v dashVar) bool { return v.Name == "job" }))
}
