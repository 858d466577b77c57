package deploy

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// dashboard is what the tests read of grafana/ferry.json.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []dashVar `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type dashVar struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Definition string `json:"definition"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile("grafana/ferry.json")
	require.NoError(t, err)
	var d dashboard
	require.NoError(t, json.Unmarshal(b, &d))
	var flat []panel
	for _, p := range d.Panels {
		flat = append(flat, p)
		flat = append(flat, p.Panels...)
	}
	d.Panels = flat
	return d
}

// queries are every PromQL expression of the alert rules and the
// dashboard, by where they are.
func queries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, g := range list(t, readYAML(t, "prometheus/alerts.yml")[0], "groups") {
		for _, r := range list(t, g, "rules") {
			out["alert "+str(t, r, "alert")] = str(t, r, "expr")
		}
	}
	d := readDashboard(t)
	for _, p := range d.Panels {
		for i, tg := range p.Targets {
			out[fmt.Sprintf("panel %q #%d", p.Title, i)] = tg.Expr
		}
	}
	for _, v := range d.Templating.List {
		if m := regexp.MustCompile(`^label_values\((\w+),\s*\w+\)$`).FindStringSubmatch(v.Definition); m != nil {
			out["variable "+v.Name] = m[1]
		} else {
			require.Empty(t, v.Definition, "variable %s: unexpected query", v.Name)
		}
	}
	return out
}

// promqlFuncs and promqlWords are the PromQL functions, aggregations and
// keywords the queries use; every other name in them is a metric.
var (
	promqlWords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool"}
	stringLit   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	braces      = regexp.MustCompile(`\{[^}]*\}`)
	brackets    = regexp.MustCompile(`\[[^\]]*\]`)
	grouping    = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	ident       = regexp.MustCompile(`\b[a-zA-Z_:][a-zA-Z0-9_:]*\b(\s*\()?`)
)

// metricNames returns the metric names in a PromQL expression.
func metricNames(expr string) []string {
	s := stringLit.ReplaceAllString(expr, `""`)
	s = braces.ReplaceAllString(s, "{}")
	s = brackets.ReplaceAllString(s, "[]")
	s = grouping.ReplaceAllString(s, "")
	var out []string
	for _, m := range ident.FindAllStringSubmatch(s, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(m[0]), "("))
		if m[1] != "" || slices.Contains(promqlWords, name) {
			continue // a function call, or a keyword
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNames_Extraction(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"ferry_jobs", "ferry_x_total"},
		metricNames(`max by (queue, state) (ferry_jobs{job=~"$job", state="a b"}) / sum without (x) (rate(ferry_x_total[5m] offset 1m)) > bool 0`))
	require.Equal(t, []string{"ferry_a", "ferry_a"}, metricNames(`max_over_time((ferry_a > on (job) ferry_a)[7d:1m])`))
}

// sourceMetrics are the metric names ferry's Go source declares: the
// first argument of prometheus.NewDesc, and the Name of prometheus's
// …Opts literals (a histogram's with its _bucket, _sum and _count
// series), as string literals or constants.
func sourceMetrics(t *testing.T) map[string]bool {
	t.Helper()
	root := repoRoot(t)
	out := map[string]bool{}
	// Package by package, so constants resolve.
	dirs := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); p != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			dirs[filepath.Dir(p)] = true
		}
		return nil
	})
	require.NoError(t, err)
	for dir := range dirs {
		fset := token.NewFileSet()
		pkgs, err := parser.ParseDir(fset, dir, func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		require.NoError(t, err)
		for _, pkg := range pkgs {
			consts := map[string]string{}
			for _, f := range pkg.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					if vs, ok := n.(*ast.ValueSpec); ok {
						for i, name := range vs.Names {
							if i < len(vs.Values) {
								if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
									consts[name.Name], _ = strconv.Unquote(lit.Value)
								}
							}
						}
					}
					return true
				})
			}
			value := func(e ast.Expr) string {
				switch v := e.(type) {
				case *ast.BasicLit:
					s, _ := strconv.Unquote(v.Value)
					return s
				case *ast.Ident:
					s, ok := consts[v.Name]
					require.True(t, ok, "%s: metric name %s is not a constant of its package", fset.Position(v.Pos()), v.Name)
					return s
				}
				t.Fatalf("%s: a metric name that is neither a literal nor a constant", fset.Position(e.Pos()))
				return ""
			}
			for _, f := range pkg.Files {
				ast.Inspect(f, func(n ast.Node) bool {
					switch v := n.(type) {
					case *ast.CallExpr:
						if sel, ok := v.Fun.(*ast.SelectorExpr); ok && isPkg(sel.X, "prometheus") && sel.Sel.Name == "NewDesc" {
							out[value(v.Args[0])] = true
						}
					case *ast.CompositeLit:
						sel, ok := v.Type.(*ast.SelectorExpr)
						if !ok || !isPkg(sel.X, "prometheus") || !strings.HasSuffix(sel.Sel.Name, "Opts") {
							return true
						}
						for _, el := range v.Elts {
							kv := el.(*ast.KeyValueExpr)
							switch kv.Key.(*ast.Ident).Name {
							case "Namespace", "Subsystem":
								t.Fatalf("%s: a metric name built from Namespace or Subsystem; teach this test", fset.Position(kv.Pos()))
							case "Name":
								name := value(kv.Value)
								switch sel.Sel.Name {
								case "HistogramOpts":
									for _, s := range []string{"_bucket", "_sum", "_count"} {
										out[name+s] = true
									}
								case "SummaryOpts":
									out[name+"_sum"], out[name+"_count"], out[name] = true, true, true
								default:
									out[name] = true
								}
							}
						}
					}
					return true
				})
			}
		}
	}
	return out
}

func isPkg(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// A real worker, as the manifests run it (an admin token, the admin
// server beyond loopback's reach only with it): the probes answer without
// the token, /metrics with it, and every metric the alert rules and the
// dashboard read is one the code declares and the worker exports.
func TestMetrics_RealWorker(t *testing.T) {
	t.Parallel()
	declared := sourceMetrics(t)
	for _, m := range []string{"ferry_election_is_leader", "ferry_jobs_rescued_total", "ferry_outbox_deliveries", "ferry_job_duration_seconds_count"} {
		require.True(t, declared[m], "the source scan missed %s: it is broken", m)
	}

	// A receiver that always fails: the delivery attempts fail, and are
	// counted.
	var hits atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(hook.Close)
	cfg := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf(`schedules:
  - id: deploytest-tick
    name: Deploy test tick
    every: 1s
    kind: ferry.noop
outbox:
  routes:
    - topic: deploytest.event
      name: failing
      url: %s/hook
      secret_env: DEPLOYTEST_HOOK_SECRET
      timeout: 2s
`, hook.URL)), 0o644))

	url := pgtest.NewDatabase(t, true)
	bins := proctest.Build(t, "./cmd/worker", "./cmd/enqueue")
	const token = "deploytest-admin-token"
	env := []string{
		"DATABASE_URL=" + url,
		"FERRY_LOG_FORMAT=json",
		"FERRY_ADMIN_ADDR=127.0.0.1:0",
		"FERRY_ADMIN_TOKEN=" + token,
		"FERRY_CONFIG=" + cfg,
		"FERRY_LEADER_TICK=1s",
		"DEPLOYTEST_HOOK_SECRET=s3cret",
	}
	w := proctest.Start(t, bins["./cmd/worker"], env, "run")
	line, err := w.WaitForLineFunc(30*time.Second, logtest.Logged("ferry: started"))
	require.NoError(t, err)
	var started struct {
		AdminAddr string `json:"admin_addr"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &started))
	require.NotEmpty(t, started.AdminAddr)
	base := "http://" + started.AdminAddr

	get := func(path, auth, host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	// The probes of the Deployment, as a kubelet sends them: no token, the
	// pod's address as Host.
	k := loadK8s(t)
	c := at(t, k.get(t, "Deployment", "ferry-worker"), "spec", "template", "spec", "containers", 0)
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		path := str(t, c, probe, "httpGet", "path")
		code, body := get(path, "", "10.0.0.7:9090")
		require.Equal(t, http.StatusOK, code, "%s %s: %s", probe, path, body)
	}
	code, _ := get("/metrics", "", "10.0.0.7:9090")
	require.Equal(t, http.StatusUnauthorized, code, "/metrics needs the token")
	code, _ = get("/admin/api/summary", "", "")
	require.Equal(t, http.StatusUnauthorized, code, "the console needs the token")

	// An outbox message to the failing route, and wait for the schedule
	// to tick and a delivery attempt to fail.
	out, stderr, exit := proctest.Run(t, bins["./cmd/enqueue"], env, nil, "outbox", "add", "deploytest.event", "--payload", `{"n":1}`)
	require.Zero(t, exit, "enqueue outbox add: %s %s", out, stderr)
	var scrape string
	require.Eventually(t, func() bool {
		code, scrape = get("/metrics", "Bearer "+token, "10.0.0.7:9090")
		return code == http.StatusOK &&
			strings.Contains(scrape, `ferry_schedule_last_tick_age_seconds{name="Deploy test tick",schedule="deploytest-tick"}`) &&
			strings.Contains(scrape, `ferry_job_duration_seconds_count{kind="outbox.deliver",outcome="failed"}`) &&
			strings.Contains(scrape, `ferry_outbox_deliveries{route="failing",status="pending"}`)
	}, 60*time.Second, 250*time.Millisecond, "the worker's metrics never showed a tick and a failed delivery")
	require.Contains(t, scrape, "ferry_election_is_leader 1")

	exported := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(scrape))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			name := f[2]
			switch f[3] {
			case "histogram":
				exported[name+"_bucket"], exported[name+"_sum"], exported[name+"_count"] = true, true, true
			case "summary":
				exported[name], exported[name+"_sum"], exported[name+"_count"] = true, true, true
			default:
				exported[name] = true
			}
		}
	}
	require.NoError(t, sc.Err())

	// What the worker exports of ferry's own, the source declares: the
	// scan of the source is sound.
	for name := range exported {
		if strings.HasPrefix(name, "ferry_") {
			require.True(t, declared[name], "the worker exports %s, which the source scan did not find", name)
		}
	}

	// Every metric of the rules and the dashboard: ferry's are declared
	// in the source (some appear only after an event: a full queue, a
	// rescue); the others (Go and process collectors) are exported.
	for where, expr := range queries(t) {
		names := metricNames(expr)
		require.NotEmpty(t, names, "%s: no metric in %s", where, expr)
		for _, name := range names {
			if strings.HasPrefix(name, "ferry_") {
				require.True(t, declared[name], "%s: %s is not a metric ferry declares", where, name)
			} else {
				require.True(t, exported[name], "%s: %s is not a metric the worker exports", where, name)
			}
		}
	}

	require.NoError(t, w.Signal(syscall.SIGTERM))
	exit, err = w.Wait(30 * time.Second)
	require.NoError(t, err)
	require.Zero(t, exit, "worker exit after SIGTERM:\n%s", w.Stderr())
	require.Positive(t, hits.Load())
}

// The config files of docker-compose.yml and of the Kubernetes ConfigMap
// start a real worker.
func TestConfigFiles_StartAWorker(t *testing.T) {
	t.Parallel()
	k := loadK8s(t)
	k8sCfg := filepath.Join(t.TempDir(), "ferry.yaml")
	cm := k.get(t, "ConfigMap", "ferry-config")
	require.NoError(t, os.WriteFile(k8sCfg, []byte(str(t, cm, "data", "ferry.yaml")), 0o644))
	composeCfg, err := filepath.Abs("compose/ferry.yaml")
	require.NoError(t, err)

	bins := proctest.Build(t, "./cmd/worker")
	for name, cfg := range map[string]string{"compose": composeCfg, "k8s": k8sCfg} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t, true)
			env := []string{"DATABASE_URL=" + url, "FERRY_LOG_FORMAT=json", "FERRY_CONFIG=" + cfg, "FERRY_ADMIN_ADDR=off"}
			for secret := range configSecretEnvs(t, cfg) {
				env = append(env, secret+"=s3cret")
			}
			w := proctest.Start(t, bins["./cmd/worker"], env, "run")
			_, err := w.WaitForLineFunc(30*time.Second, logtest.Logged("ferry: started"))
			require.NoError(t, err, "a worker with %s's config file did not start", name)
			require.NoError(t, w.Signal(syscall.SIGTERM))
			code, err := w.Wait(30 * time.Second)
			require.NoError(t, err)
			require.Zero(t, code, w.Stderr())
		})
	}
}
