package ferry_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// floors are the floors of the house, lowest first, each by the path
// prefixes of its packages (below github.com/ferryq/ferry). A package
// imports only packages of its own floor or lower (docs/development.md, "Layout").
var floors = []struct {
	name     string
	prefixes []string
}{
	{"base", []string{"/internal/base/"}},
	{"library modules", []string{"/jobs", "/outbox", "/seal", "/locks", "/broadcast", "/migrations", "/otelferry", "/workflow"}},
	{"capabilities", []string{
		"/election", "/periodic", "/telegram", "/internal/admin", "/internal/broadcastcap", "/internal/capability",
		"/internal/config", "/internal/lease", "/internal/limit", "/internal/liveness", "/internal/lockcap", "/internal/pilot",
		"/internal/logging", "/internal/metrics", "/internal/outboxcap", "/internal/queuecap", "/internal/retention",
		"/internal/refdoc", "/internal/sealcap", "/internal/settings", "/internal/tracing", "/internal/workflowcap",
	}},
	{"root", []string{""}},
	{"ferrycli", []string{"/ferrycli"}},
	{"commands and tools", []string{
		"/cmd/", "/tools/", "/examples/", "/deploy", "/internal/e2e", "/internal/browsertest", "/internal/testkit/",
		// the test helpers of the base module, which migrate the databases
		// they make
		"/internal/base/scratchdb", "/internal/base/pgtest", "/internal/base/logtest",
	}},
}

// floorOf is the index in floors of a package of the repository: the
// floor of the longest prefix that holds it.
func floorOf(t *testing.T, pkg string) int {
	rel := strings.TrimPrefix(pkg, "github.com/ferryq/ferry")
	floor, longest := -1, -1
	for i, f := range floors {
		for _, p := range f.prefixes {
			holds := rel == p || (p != "" && strings.HasPrefix(rel, p) && (strings.HasSuffix(p, "/") || strings.HasPrefix(rel[len(p):], "/")))
			if holds && len(p) > longest {
				floor, longest = i, len(p)
			}
		}
	}
	if floor < 0 {
		t.Fatalf("package %s is on no floor: add it to floors", pkg)
	}
	return floor
}

// TestFloors_DataFlowsDownhill: no package of the repository imports a
// package on a higher floor (tests aside), so that the root package is
// the only one that knows every capability, and no capability knows the
// root.
func TestFloors_DataFlowsDownhill(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "github.com/ferryq/ferry/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Greater(t, len(lines), 40, "go list listed the repository's packages")
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		floor := floorOf(t, pkg)
		for _, imp := range imports {
			if !strings.HasPrefix(imp, "github.com/ferryq/ferry") {
				continue
			}
			if f := floorOf(t, imp); f > floor {
				t.Errorf("%s (floor %q) imports %s, on the higher floor %q", pkg, floors[floor].name, imp, floors[f].name)
			}
		}
	}
}

// TestCmd_HoldsTheShippedBinaries: cmd/ is the two binaries a user builds
// (go build -o bin/ ./cmd/...); the bench and the chaos suite live in
// tools/, where nobody builds them by accident.
func TestCmd_HoldsTheShippedBinaries(t *testing.T) {
	entries, err := os.ReadDir("cmd")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	require.Equal(t, []string{"enqueue", "worker"}, names)
}
