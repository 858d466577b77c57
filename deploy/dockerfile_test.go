package deploy

import (
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stage is one FROM … AS of a Dockerfile, with its instructions.
type stage struct {
	name, from string
	env        map[string]string
	args       map[string]string // ARG defaults
	runs       []string
	copies     [][]string // each COPY's words, --from first when given
	user       string
	entrypoint []string
	cmd        []string
}

// dockerStages parses a Dockerfile: its stages by name, in order, the
// last (the default target) under "" as well.
func dockerStages(t *testing.T, file string) map[string]*stage {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	stages := map[string]*stage{}
	global := map[string]string{}
	var cur *stage
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		instr = strings.ToUpper(instr)
		if instr == "FROM" {
			f := strings.Fields(rest)
			cur = &stage{from: f[0], env: map[string]string{}, args: map[string]string{}}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				cur.name = f[2]
				stages[f[2]] = cur
			}
			if base, ok := stages[cur.from]; ok {
				cur.env = maps(base.env)
				cur.args = maps(base.args)
			}
			stages[""] = cur
			continue
		}
		if cur == nil {
			require.Equal(t, "ARG", instr, "%s before the first FROM", instr)
			k, v, _ := strings.Cut(rest, "=")
			global[k] = v
			continue
		}
		switch instr {
		case "ARG":
			k, v, _ := strings.Cut(rest, "=")
			cur.args[k] = v
		case "ENV":
			for _, kv := range strings.Fields(rest) {
				k, v, ok := strings.Cut(kv, "=")
				require.True(t, ok, "ENV %s: use NAME=value", rest)
				cur.env[k] = v
			}
		case "RUN":
			cur.runs = append(cur.runs, rest)
		case "COPY":
			cur.copies = append(cur.copies, strings.Fields(rest))
		case "USER":
			cur.user = rest
		case "ENTRYPOINT":
			require.NoError(t, json.Unmarshal([]byte(rest), &cur.entrypoint), "ENTRYPOINT must be exec form")
		case "CMD":
			require.NoError(t, json.Unmarshal([]byte(rest), &cur.cmd), "CMD must be exec form")
		}
	}
	for _, s := range stages {
		s.from = os.Expand(s.from, func(k string) string { return global[k] })
	}
	require.NotNil(t, cur, "%s has no FROM", file)
	return stages
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// goBuild is a `go build` of a RUN instruction: its arguments (shell
// quoting undone) and its output directory.
type goBuild struct {
	args []string
	out  string
	pkgs []string
}

func parseGoBuild(t *testing.T, s *stage) goBuild {
	t.Helper()
	var found []goBuild
	for _, r := range s.runs {
		words := shellWords(t, r)
		i := slices.Index(words, "go")
		if i < 0 || i+1 >= len(words) || words[i+1] != "build" {
			continue
		}
		b := goBuild{args: words[i+2:]}
		for j := 0; j < len(b.args); j++ {
			a := b.args[j]
			switch {
			case a == "-o":
				b.out = b.args[j+1]
				j++
			case a == "-ldflags" || a == "-tags" || a == "-gcflags":
				j++
			case strings.HasPrefix(a, "./"):
				b.pkgs = append(b.pkgs, a)
			}
		}
		found = append(found, b)
	}
	require.Len(t, found, 1, "stage %s: want one go build", s.name)
	return found[0]
}

// shellWords splits a RUN line into words, undoing double quotes and
// dropping RUN's --mount options.
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var (
		words []string
		cur   strings.Builder
		quote bool
		in    bool
	)
	for _, r := range s {
		switch {
		case r == '"':
			quote, in = !quote, true
		case (r == ' ' || r == '\t') && !quote:
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	require.False(t, quote, "unbalanced quote in %s", s)
	if in {
		words = append(words, cur.String())
	}
	return slices.DeleteFunc(words, func(w string) bool { return strings.HasPrefix(w, "--mount=") })
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	stages := dockerStages(t, "Dockerfile")
	b, err := os.ReadFile("Dockerfile")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(b), "# syntax=docker/dockerfile:1\n"), "RUN --mount needs BuildKit's Dockerfile syntax")

	// The builder's Go is go.mod's.
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	require.NotNil(t, m, "go.mod has no go directive")
	src, build := stages["source"], stages["build"]
	require.NotNil(t, src, "no stage named source")
	require.NotNil(t, build, "no stage named build")
	require.Equal(t, "golang:"+string(m[1])+"-bookworm", src.from, "the builder's Go is go.mod's")
	require.Equal(t, "source", build.from)
	require.Equal(t, "source", stages["build-demo-receiver"].from)

	// Static binaries of the worker and the CLI, from main packages.
	require.Equal(t, "0", build.env["CGO_ENABLED"], "CGO_ENABLED=0: static binaries")
	gb := parseGoBuild(t, build)
	require.ElementsMatch(t, []string{"./cmd/worker", "./cmd/enqueue"}, gb.pkgs)
	require.True(t, strings.HasSuffix(gb.out, "/"), "go build -o DIR/ names each binary after its package")
	for _, pkg := range append(slices.Clone(gb.pkgs), parseGoBuild(t, stages["build-demo-receiver"]).pkgs...) {
		out, code := run(t, root, "go", "list", "-f", "{{.Name}}", pkg)
		require.Zero(t, code, "go list %s: %s", pkg, out)
		require.Equal(t, "main", strings.TrimSpace(out), "%s is not a command", pkg)
	}

	// The default target: the two binaries, the worker as entrypoint,
	// `run` by default, a non-root user, a small static base.
	final := stages[""]
	require.Equal(t, "ferry", final.name)
	require.Regexp(t, `^gcr\.io/distroless/static-debian\d+:nonroot$`, final.from)
	requireNonRoot(t, final)
	var copied []string
	for _, c := range final.copies {
		require.Equal(t, "--from=build", c[0], "COPY %v", c)
		dst := c[len(c)-1]
		for _, src := range c[1 : len(c)-1] {
			require.Equal(t, path.Clean(gb.out), path.Dir(src), "COPY %s: not a binary of the build", src)
			copied = append(copied, path.Join(dst, path.Base(src)))
		}
	}
	require.ElementsMatch(t, []string{"/usr/local/bin/worker", "/usr/local/bin/enqueue"}, copied)
	require.Equal(t, []string{"/usr/local/bin/worker"}, final.entrypoint)
	require.Equal(t, []string{"run"}, findCommand(t, apps()["worker"], final.cmd...).path)

	recv := stages["demo-receiver"]
	require.NotNil(t, recv, "no stage demo-receiver")
	requireNonRoot(t, recv)
	require.Equal(t, []string{"/usr/local/bin/demo-receiver"}, recv.entrypoint)

	// The build context keeps what the build needs.
	ignore, err := os.ReadFile("Dockerfile.dockerignore")
	require.NoError(t, err)
	for _, p := range []string{"go.mod", "go.sum", "cmd/worker/main.go", "cmd/enqueue/main.go", "examples/receiver/main.go",
		"migrations/001_job_kind.up.sql", "internal/admin/templates", "ferrycli/worker.go"} {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
		require.NoError(t, err)
		require.False(t, ignored(string(ignore), p), "Dockerfile.dockerignore leaves out %s", p)
	}
	require.True(t, ignored(string(ignore), ".git/config"), "the context must not carry .git")

	// The build step, run here as the Dockerfile runs it: static binaries
	// that work.
	t.Run("BuildSteps", func(t *testing.T) {
		t.Parallel()
		out := t.TempDir()
		args := slices.Clone(gb.args)
		for i, a := range args {
			if a == gb.out {
				args[i] = out + "/"
			}
			args[i] = strings.ReplaceAll(args[i], "${VERSION}", "v0.0.0-deploytest")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", append([]string{"build"}, args...)...)
		cmd.Dir = root
		cmd.Env = os.Environ()
		for k, v := range build.env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		b, err := cmd.CombinedOutput()
		require.NoError(t, err, "go build %s:\n%s", strings.Join(args, " "), b)
		for _, name := range []string{"worker", "enqueue"} {
			bin := filepath.Join(out, name)
			requireStatic(t, bin)
		}
		version, code := run(t, out, filepath.Join(out, "worker"), "version")
		require.Zero(t, code, version)
		require.Equal(t, "v0.0.0-deploytest\n", version, "-X sets the version")
	})

	t.Run("DockerBuild", func(t *testing.T) {
		t.Parallel()
		dockerBuild(t, root)
	})
}

func requireNonRoot(t *testing.T, s *stage) {
	t.Helper()
	uid, _, _ := strings.Cut(s.user, ":")
	n, err := strconv.Atoi(uid)
	require.NoError(t, err, "stage %s: USER %q must be numeric, so runAsNonRoot can check it", s.name, s.user)
	require.NotZero(t, n, "stage %s runs as root", s.name)
	require.Equal(t, imageUID, n, "stage %s: the manifests run as %d", s.name, imageUID)
}

// requireStatic requires bin to be an ELF executable with no interpreter
// and no shared library: it runs on distroless static.
func requireStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		require.NotEqual(t, elf.PT_INTERP, p.Type, "%s has an interpreter: not static", bin)
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	require.Empty(t, libs, "%s links shared libraries", bin)
}

// ignored reports whether a .dockerignore (its simple forms: names, globs,
// **/ prefixes) leaves p out of the build context.
func ignored(ignore, p string) bool {
	out := false
	for _, line := range strings.Split(ignore, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		neg := strings.HasPrefix(line, "!")
		pat := strings.TrimPrefix(line, "!")
		if matchIgnore(pat, p) {
			out = !neg
		}
	}
	return out
}

func matchIgnore(pat, p string) bool {
	parts := strings.Split(p, "/")
	for i := range parts {
		prefix := strings.Join(parts[:i+1], "/")
		if ok, _ := path.Match(pat, prefix); ok {
			return true
		}
		if rest, ok := strings.CutPrefix(pat, "**/"); ok {
			for j := 0; j <= i; j++ {
				if ok, _ := path.Match(rest, strings.Join(parts[j:i+1], "/")); ok {
					return true
				}
			}
		}
	}
	return false
}

// dockerBuild builds the image where a Docker daemon answers, and says so
// plainly where none does. FERRY_TEST_DOCKER=require makes a missing
// daemon a failure (for a CI machine that has one).
func dockerBuild(t *testing.T, root string) {
	docker, err := exec.LookPath("docker")
	var why string
	if err != nil {
		why = "no docker client: " + err.Error()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		out, err := exec.CommandContext(ctx, docker, "version", "--format", "{{.Server.Version}}").CombinedOutput()
		cancel()
		if err != nil {
			why = fmt.Sprintf("docker version: %v: %s", err, strings.TrimSpace(string(out)))
		}
	}
	if why != "" {
		if os.Getenv("FERRY_TEST_DOCKER") == "require" {
			t.Fatalf("FERRY_TEST_DOCKER=require, and no Docker daemon answers (%s)", why)
		}
		t.Logf("NOT BUILT: deploy/Dockerfile was not built with Docker, since no Docker daemon answers (%s). "+
			"Its stages, binaries, user and build context were checked statically, and its go build step was run here. "+
			"Set FERRY_TEST_DOCKER=require to make this a failure.", why)
		return
	}
	tag := fmt.Sprintf("ferry-deploytest:%d", time.Now().UnixNano())
	recvTag := tag + "-receiver"
	t.Cleanup(func() { _, _ = run(t, root, docker, "image", "rm", "-f", tag, recvTag) })
	out, code := run(t, root, docker, "build", "-f", "deploy/Dockerfile", "--build-arg", "VERSION=v0.0.0-deploytest", "-t", tag, ".")
	require.Zero(t, code, "docker build:\n%s", out)
	out, code = run(t, root, docker, "run", "--rm", tag, "version")
	require.Zero(t, code, "docker run %s version:\n%s", tag, out)
	require.Equal(t, "v0.0.0-deploytest", strings.TrimSpace(out))
	out, code = run(t, root, docker, "run", "--rm", "--entrypoint", "/usr/local/bin/enqueue", tag, "--help")
	require.Zero(t, code, "docker run enqueue --help:\n%s", out)
	out, code = run(t, root, docker, "image", "inspect", "--format", "{{.Config.User}}", tag)
	require.Zero(t, code, out)
	require.Equal(t, fmt.Sprintf("%d:%d", imageUID, imageUID), strings.TrimSpace(out))
	out, code = run(t, root, docker, "build", "-f", "deploy/Dockerfile", "--target", "demo-receiver", "-t", recvTag, ".")
	require.Zero(t, code, "docker build --target demo-receiver:\n%s", out)
	t.Logf("built deploy/Dockerfile with Docker: %s and %s", tag, recvTag)
}
