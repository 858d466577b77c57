package proctest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/fleet"
)

// dirPrefix names the build directories: proctest-<pid>-<random>, so that a
// later run can tell whether the process that made one is gone.
const dirPrefix = "proctest-"

// builds is what Build made in this test process: a builder into a
// temporary directory, made on first use. The mutex is held for the whole of
// a Build, so parallel tests that need the same binaries wait for one build.
var builds struct {
	mu  sync.Mutex
	dir string
	b   *fleet.Builder
	// atExit is set once Cleanup is registered with pgtest.AtExit.
	atExit bool
}

// Build compiles the named main packages of this module (paths relative to
// the module root, like "./cmd/worker", or full import paths) and returns
// the path of each binary, keyed by the package as given. Each package is
// built once per test process; later calls return the same paths. A failed
// build fails tb with the go command's output, and fails every later call for
// that package the same way without building again (packages missing from
// the cache are built by one go command, so they fail together).
//
// Binaries are named after the last element of their package path, so two
// packages that share it cannot both be built.
func Build(tb testing.TB, pkgs ...string) map[string]string {
	tb.Helper()
	bins, err := build(pkgs)
	if err != nil {
		tb.Fatalf("proctest: %v", err)
	}
	return bins
}

func build(pkgs []string) (map[string]string, error) {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.b == nil {
		sweep()
		if !builds.atExit {
			builds.atExit = true
			pgtest.AtExit(Cleanup)
		}
		dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return nil, fmt.Errorf("make build directory: %w", err)
		}
		builds.dir, builds.b = dir, &fleet.Builder{Dir: dir}
	}
	return builds.b.Build(pkgs...)
}

// Cleanup removes the binaries Build made; a later Build builds again.
// pgtest.Main calls it after the tests.
func Cleanup() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	builds.dir, builds.b = "", nil
}

// sweep removes build directories left by test processes that have exited
// (whose TestMain could not call Cleanup).
func sweep() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*-*"))
	for _, dir := range matches {
		rest := strings.TrimPrefix(filepath.Base(dir), dirPrefix)
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			_ = os.RemoveAll(dir)
		}
	}
}
