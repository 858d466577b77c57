package ferry_test

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// libraryModules are ferry's modules of their own (each directory has a
// go.mod): the packages a Go service imports to write in its own
// transactions (jobs, outbox, seal, locks, broadcast), the migrations, and
// the internal packages they share (internal/base); and otelferry, which a
// traced service adds. A service that requires them gets their go.mod
// files' requirements, never the root module's (River UI, Prometheus, the
// OpenTelemetry SDK, the CLI, the task runner, the test and bench tools).
var libraryModules = []string{"internal/base", "migrations", "seal", "jobs", "outbox", "locks", "broadcast", "otelferry", "workflow"}

// tracedModules are the library modules whose graph may hold the
// OpenTelemetry API (tracingModules): otelferry alone.
var tracedModules = []string{"otelferry"}

// writerPackages are what a Go service imports to insert jobs and outbox
// messages in its own transactions.
var writerPackages = []string{
	"github.com/ferryq/ferry/jobs", "github.com/ferryq/ferry/outbox", "github.com/ferryq/ferry/seal",
	"github.com/ferryq/ferry/locks", "github.com/ferryq/ferry/broadcast", "github.com/ferryq/ferry/workflow",
}

// writerModules are the modules writerPackages may link: ferry's library
// modules, River and pgx, and the modules River and pgx themselves link, by
// prefix. No tracing library: the caller's trace context goes into each job
// and message through otelferry, which a traced service imports.
var writerModules = []string{
	"github.com/ferryq/ferry/",    // the library modules, never the root one
	"github.com/riverqueue/river", // and its riverdriver, rivershared, rivertype modules
	"github.com/jackc/",           // pgx, puddle, pgpassfile, pgservicefile
	"github.com/tidwall/",         // gjson and sjson, River's
	"golang.org/x/sync",           // pgx's and River's
	"golang.org/x/text",           // pgx's
}

// libraryGraphModules are the modules the library modules' go.mod files may
// bring into a service's module graph beyond writerModules: the
// requirements of River's own go.mod file, and the test libraries (testify,
// goleak) that River's tests use too.
var libraryGraphModules = []string{
	"github.com/robfig/cron/v3", "github.com/jackc/pgerrcode", // River's
	"golang.org/x/mod", "golang.org/x/tools", // River's and goleak's
	"github.com/stretchr/", "github.com/davecgh/go-spew", "github.com/pmezard/go-difflib", "github.com/kr/pretty",
	"gopkg.in/check.v1", "gopkg.in/yaml.v3", "go.yaml.in/yaml/v3", "go.uber.org/goleak", // testify's and goleak's
}

// tracingModules are the OpenTelemetry API's modules and its go.mod's
// requirements: in otelferry's graph only, never its SDK or exporters.
var tracingModules = []string{
	"go.opentelemetry.io/otel", "go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/metric",
	"go.opentelemetry.io/otel/log", "go.opentelemetry.io/auto/sdk",
	"github.com/go-logr/logr", "github.com/go-logr/stdr", "github.com/google/go-cmp", "github.com/cespare/xxhash/v2",
}

// TestWriterPackagesLean: the packages a service imports to write link
// nothing but River and pgx: no Prometheus client, CLI, logger, YAML,
// console or OpenTelemetry. (The worker side registers metrics for them,
// internal/metrics, and sets tracing up, internal/tracing.)
func TestWriterPackagesLean(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{if .Module}}{{.ImportPath}} {{.Module.Path}}{{end}}"}, writerPackages...)...).CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	var modules []string
	for line := range strings.Lines(string(out)) {
		pkg, mod, ok := strings.Cut(strings.TrimSpace(line), " ")
		require.True(t, ok, "go list line %q", line)
		allowed := slices.ContainsFunc(writerModules, func(prefix string) bool { return strings.HasPrefix(mod, prefix) })
		require.True(t, allowed, "%s (module %s) is linked by a writer package: keep it out of %v", pkg, mod, writerPackages)
		modules = append(modules, mod)
	}
	require.Contains(t, modules, "github.com/riverqueue/river", "go list listed River: the check read something")
	require.Contains(t, modules, "github.com/ferryq/ferry/jobs", "jobs is a module of its own")
}

// TestLibraryModulesLean: each library module's module graph (what a
// service that requires it gets: go list -m all, in the module, outside any
// workspace) holds River's, pgx's and the test libraries' modules and
// ferry's library modules, and otelferry's the OpenTelemetry API's too:
// never the root module, whose go.mod lists the worker's, the CLI's and the
// tools' modules.
func TestLibraryModulesLean(t *testing.T) {
	t.Parallel()
	for _, dir := range libraryModules {
		t.Run(strings.ReplaceAll(dir, "/", "_"), func(t *testing.T) {
			t.Parallel()
			require.FileExists(t, filepath.Join(dir, "go.mod"))
			cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}}", "all")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "go list -m all in %s: %s", dir, out)
			mods := strings.Fields(string(out))
			require.Equal(t, "github.com/ferryq/ferry/"+dir, mods[0], "the main module first")
			require.Contains(t, mods, "github.com/riverqueue/river", "the check read the graph")
			traced := slices.Contains(tracedModules, dir)
			if traced {
				require.Contains(t, mods, "go.opentelemetry.io/otel/trace", "the check read the graph")
			}
			for _, mod := range mods[1:] {
				require.NotEqual(t, "github.com/ferryq/ferry", mod, "%s requires the root module: its go.mod would bring the worker's modules to every service", dir)
				allowed := (traced && slices.Contains(tracingModules, mod)) ||
					slices.ContainsFunc(append(slices.Clone(writerModules), libraryGraphModules...), func(prefix string) bool { return strings.HasPrefix(mod, prefix) })
				require.True(t, allowed, "module %s is in the module graph of %s: every service that requires it gets it", mod, dir)
			}
		})
	}
}

// maxServiceModules is the lean bound: a service that imports jobs, outbox
// and workflow has at most this many modules in `go list -m all`.
const maxServiceModules = 40

// TestServiceModuleBound holds the lean bound on the union of the module
// graphs of jobs, outbox and workflow: the graph of a service that
// requires the three.
func TestServiceModuleBound(t *testing.T) {
	t.Parallel()
	union := map[string]bool{}
	for _, dir := range []string{"jobs", "outbox", "workflow"} {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Path}}", "all")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go list -m all in %s: %s", dir, out)
		mods := strings.Fields(string(out))
		require.Contains(t, mods, "github.com/riverqueue/river", "the check read the graph")
		for _, m := range mods[1:] {
			union[m] = true
		}
		union["github.com/ferryq/ferry/"+dir] = true
	}
	require.LessOrEqual(t, len(union)+1, maxServiceModules, // +1: the service's own module
		"a service requiring jobs, outbox and workflow has %d modules in its graph: %v", len(union)+1, slices.Sorted(maps.Keys(union)))
}
