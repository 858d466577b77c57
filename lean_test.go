package ferry_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// writerPackages are what a Go service imports to insert jobs and outbox
// messages in its own transactions.
var writerPackages = []string{"./jobs", "./outbox", "./seal", "./locks", "./broadcast"}

// writerModules are the modules writerPackages may link: ferry, River and
// pgx, and the modules River and pgx themselves link, by prefix; and the
// OpenTelemetry trace API, exactly (the trace context of the caller goes
// into each job and message), never its SDK or exporters.
var (
	writerModules = []string{
		"github.com/ferryq/ferry",
		"github.com/riverqueue/river", // and its riverdriver, rivershared, rivertype modules
		"github.com/jackc/",           // pgx, puddle, pgpassfile, pgservicefile
		"github.com/tidwall/",         // gjson and sjson, River's
		"golang.org/x/sync",           // pgx's and River's
		"golang.org/x/text",           // pgx's
	}
	writerModulesExact = []string{
		"go.opentelemetry.io/otel",       // propagation, attribute, codes
		"go.opentelemetry.io/otel/trace", // the span context
		"github.com/cespare/xxhash/v2",   // the attribute package's
	}
)

// TestWriterPackagesLean: the packages a service imports to write link
// nothing but River, pgx and the OpenTelemetry trace API: no Prometheus
// client, CLI, logger, YAML, console or OpenTelemetry SDK. (The worker side
// registers metrics for them, internal/metrics, and sets tracing up,
// internal/tracing.)
func TestWriterPackagesLean(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", append([]string{"list", "-deps", "-f", "{{if .Module}}{{.ImportPath}} {{.Module.Path}}{{end}}"}, writerPackages...)...).CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	var modules []string
	for line := range strings.Lines(string(out)) {
		pkg, mod, ok := strings.Cut(strings.TrimSpace(line), " ")
		require.True(t, ok, "go list line %q", line)
		allowed := slices.Contains(writerModulesExact, mod) ||
			slices.ContainsFunc(writerModules, func(prefix string) bool { return strings.HasPrefix(mod, prefix) })
		require.True(t, allowed, "%s (module %s) is linked by a writer package: keep it out of %v", pkg, mod, writerPackages)
		modules = append(modules, mod)
	}
	require.Contains(t, modules, "github.com/riverqueue/river", "go list listed River: the check read something")
}
