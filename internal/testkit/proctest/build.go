package proctest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/ferryq/ferry/internal/testkit/pgtest"
)

// dirPrefix names the build directories: proctest-<pid>-<random>, so that a
// later run can tell whether the process that made one is gone.
const dirPrefix = "proctest-"

// builds caches what Build made in this test process, keyed by the package
// as the caller spelled it. The mutex is held for the whole of a build, so
// parallel tests that need the same binaries wait for one build.
var builds struct {
	mu   sync.Mutex
	dir  string
	root string
	bins map[string]string
	errs map[string]error
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
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.bins == nil {
		builds.bins, builds.errs = map[string]string{}, map[string]error{}
	}
	var missing []string
	for _, pkg := range pkgs {
		_, built := builds.bins[pkg]
		_, failed := builds.errs[pkg]
		if !built && !failed && !slices.Contains(missing, pkg) {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 {
		if err := build(missing); err != nil {
			for _, pkg := range missing {
				builds.errs[pkg] = err
			}
		}
	}
	out := make(map[string]string, len(pkgs))
	for _, pkg := range pkgs {
		if err := builds.errs[pkg]; err != nil {
			tb.Fatalf("proctest: build %s: %v", pkg, err)
		}
		out[pkg] = builds.bins[pkg]
	}
	return out
}

// build runs one `go build` for pkgs in the module root. builds.mu is held.
func build(pkgs []string) error {
	if builds.root == "" {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		builds.root = root
	}
	if builds.dir == "" {
		sweep()
		if !builds.atExit {
			builds.atExit = true
			pgtest.AtExit(Cleanup)
		}
		dir, err := os.MkdirTemp("", dirPrefix+strconv.Itoa(os.Getpid())+"-")
		if err != nil {
			return fmt.Errorf("make build directory: %w", err)
		}
		builds.dir = dir
	}
	want := map[string]string{}
	for _, pkg := range pkgs {
		name := path.Base(path.Clean(filepath.ToSlash(pkg)))
		bin := filepath.Join(builds.dir, name)
		for other, p := range builds.bins {
			if p == bin {
				return fmt.Errorf("binary name %q is taken by %s", name, other)
			}
		}
		for other, p := range want {
			if p == bin {
				return fmt.Errorf("binary name %q is shared with %s", name, other)
			}
		}
		want[pkg] = bin
	}
	// -buildvcs=false: no VCS stamping, so the build runs no git command and
	// works outside a checkout.
	args := append([]string{"build", "-buildvcs=false", "-o", builds.dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = builds.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	for pkg, bin := range want {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("go build wrote no %s: is %s a main package?", filepath.Base(bin), pkg)
		}
		builds.bins[pkg] = bin
	}
	return nil
}

// moduleRoot is the directory of the go.mod that governs the test's working
// directory (go test runs a test binary in its package's directory).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("the test does not run inside a Go module (go env GOMOD is empty)")
	}
	return filepath.Dir(gomod), nil
}

// Cleanup removes the binaries Build made; a later Build builds again.
// pgtest.Main calls it after the tests.
func Cleanup() {
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	builds.dir, builds.bins, builds.errs = "", nil, nil
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
