package ferry_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReleaseModules runs scripts/release-modules on a clone of the
// repository: every go.mod requires ferry's library modules at the version,
// the tags it prints are the root's and one per library module, and bad
// input changes nothing.
func TestReleaseModules(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ferry")
	out, err := exec.Command("git", "clone", "-q", "--no-hardlinks", ".", dir).CombinedOutput()
	require.NoError(t, err, "git clone: %s", out)
	run := func(version string) (string, error) {
		cmd := exec.Command("bash", "scripts/release-modules", version)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	status := func() string {
		cmd := exec.Command("git", "status", "--porcelain")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git status: %s", out)
		return string(out)
	}

	for _, bad := range []string{"", "1.2.3", "v1.2", "v01.2.3", "v2.0.0"} {
		out, err := run(bad)
		require.Error(t, err, "version %q", bad)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(out), "\n")+1, "one line: %q", out)
		require.True(t, strings.HasPrefix(out, "release-modules: "), out)
		require.Empty(t, status(), "version %q changed nothing", bad)
	}

	printed, err := run("v0.9.0")
	require.NoError(t, err, printed)
	tags := strings.Fields(printed)
	require.Equal(t, "v0.9.0", tags[0])
	require.ElementsMatch(t, []string{"broadcast/v0.9.0", "internal/base/v0.9.0", "jobs/v0.9.0", "locks/v0.9.0",
		"migrations/v0.9.0", "otelferry/v0.9.0", "outbox/v0.9.0", "seal/v0.9.0", "workflow/v0.9.0"}, tags[1:])
	for _, m := range append([]string{"."}, libraryModules...) {
		gomod, err := os.ReadFile(filepath.Join(dir, m, "go.mod"))
		require.NoError(t, err)
		var required int
		for line := range strings.Lines(string(gomod)) {
			f := strings.Fields(line)
			if len(f) >= 2 && strings.HasPrefix(f[0], "github.com/ferryq/ferry/") && f[1] != "=>" {
				require.Equal(t, "v0.9.0", f[1], "%s/go.mod: %s", m, line)
				required++
			}
		}
		if m == "." || m == "outbox" {
			require.Positive(t, required, "%s/go.mod requires library modules", m)
		}
	}
	// The replace directives stay: the repository still builds.
	cmd := exec.Command("go", "build", "./...")
	cmd.Dir = dir
	out2, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build after release-modules: %s", out2)
}
