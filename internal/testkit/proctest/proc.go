package proctest

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferryq/ferry/internal/testkit/fleet"
)

const (
	// RunTimeout bounds a Run: a one-shot command that has not exited by then
	// is killed and fails the test.
	RunTimeout = 60 * time.Second
	// killTimeout is how long a cleanup waits for a process to be reaped after
	// SIGKILL.
	killTimeout = 10 * time.Second
	// logTail bounds how much of each output a failed test logs.
	logTail = 16 << 10
)

// Proc is a running (or finished) subprocess started by Start: a fleet.Proc
// that the test's end kills.
type Proc struct {
	*fleet.Proc
	tb     testing.TB
	logOut bool // log the output when the test fails
}

// Start starts bin with args in a process group of its own. env (NAME=value
// entries) is added to PATH, HOME and TMPDIR from the test's environment;
// later entries win. stdin is empty. When the test ends the process group is
// killed if the process still runs, and the output is logged if the test
// failed.
func Start(tb testing.TB, bin string, env []string, args ...string) *Proc {
	tb.Helper()
	p := start(tb, bin, env, nil, args)
	p.logOut = true
	return p
}

// Run runs bin with args to completion (at most RunTimeout) and returns its
// output and exit code. env is as for Start; stdin may be nil.
func Run(tb testing.TB, bin string, env []string, stdin io.Reader, args ...string) (stdout, stderr string, exitCode int) {
	tb.Helper()
	p := start(tb, bin, env, stdin, args)
	code, err := p.Wait(RunTimeout)
	if err != nil {
		tb.Fatalf("proctest: run %s %s: %v", filepath.Base(bin), strings.Join(args, " "), err)
	}
	return p.Stdout(), p.Stderr(), code
}

func start(tb testing.TB, bin string, env []string, stdin io.Reader, args []string) *Proc {
	tb.Helper()
	fp, err := fleet.Start(bin, env, stdin, args...)
	if err != nil {
		tb.Fatalf("proctest: %v", err)
	}
	p := &Proc{Proc: fp, tb: tb}
	tb.Cleanup(p.cleanup)
	return p
}

func (p *Proc) cleanup() {
	if !p.Exited() {
		_ = p.Kill()
		if _, err := p.Wait(killTimeout); err != nil {
			p.tb.Errorf("proctest: %s still not reaped %s after SIGKILL", p, killTimeout)
		}
	}
	if p.logOut && p.tb.Failed() {
		stdout, stderr := p.Tail(logTail)
		p.tb.Logf("%s stdout:\n%s", p, stdout)
		p.tb.Logf("%s stderr:\n%s", p, stderr)
	}
}
