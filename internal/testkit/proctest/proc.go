package proctest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
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

// inherited are the variables a child takes from the test's environment;
// everything else it gets must be passed to Start or Run.
var inherited = []string{"PATH", "HOME", "TMPDIR"}

// Proc is a running (or finished) subprocess started by Start.
type Proc struct {
	tb     testing.TB
	name   string
	cmd    *exec.Cmd
	stdout *stream
	stderr *stream
	logOut bool // log the output when the test fails

	done  chan struct{}    // closed once the process is reaped and its output read
	state *os.ProcessState // set before done is closed
	err   error            // a failure to wait, set before done is closed
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
	cmd := exec.Command(bin, args...)
	for _, name := range inherited {
		if v, ok := os.LookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &Proc{tb: tb, cmd: cmd, stdout: newStream(), stderr: newStream(), done: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, p.stdout, p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A grandchild that keeps the pipes open must not hold Wait forever.
	cmd.WaitDelay = 5 * time.Second

	// Linux sends the parent-death signal when the thread that forked the
	// child exits, not when the process does, and Go picks the thread. The
	// child is started and waited for on one locked thread, which therefore
	// outlives it, unless the whole test process dies.
	started := make(chan error)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		p.state = cmd.ProcessState
		if p.state == nil {
			p.err = err
		}
		p.stdout.end()
		p.stderr.end()
		close(p.done)
	}()
	if err := <-started; err != nil {
		tb.Fatalf("proctest: start %s: %v", bin, err)
	}
	p.name = fmt.Sprintf("%s[%d]", filepath.Base(bin), cmd.Process.Pid)
	tb.Cleanup(p.cleanup)
	return p
}

func (p *Proc) cleanup() {
	select {
	case <-p.done:
	default:
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(killTimeout):
			p.tb.Errorf("proctest: %s still not reaped %s after SIGKILL", p.name, killTimeout)
		}
	}
	if p.logOut && p.tb.Failed() {
		p.tb.Logf("%s stdout:\n%s", p.name, p.stdout.tail(logTail))
		p.tb.Logf("%s stderr:\n%s", p.name, p.stderr.tail(logTail))
	}
}

// String names the process: the binary's base name and its pid.
func (p *Proc) String() string { return p.name }

// Pid is the process id, which is also its process group id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stdout returns what the process has written to stdout so far.
func (p *Proc) Stdout() string { return p.stdout.String() }

// Stderr returns what the process has written to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Done is closed once the process has exited and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ProcessState is the exited process's state, nil while it runs.
func (p *Proc) ProcessState() *os.ProcessState {
	select {
	case <-p.done:
		return p.state
	default:
		return nil
	}
}

// Signal sends sig to the process (not its group), as an orchestrator stopping
// a service does. It returns os.ErrProcessDone once the process has exited.
func (p *Proc) Signal(sig os.Signal) error {
	return p.cmd.Process.Signal(sig)
}

// Kill sends SIGKILL to the process group, like kill -9; the process gets no
// chance to clean up. It returns os.ErrProcessDone once the process has
// exited.
func (p *Proc) Kill() error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("proctest: kill %s: %w", p.name, err)
	}
	return nil
}

// Wait waits up to timeout for the process to exit and returns its exit
// code: the status it exited with, or 128 plus the signal number when a
// signal ended it. The error is non-nil when it is still running after
// timeout.
func (p *Proc) Wait(timeout time.Duration) (exitCode int, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return -1, fmt.Errorf("%s still running after %s; stderr ends:\n%s", p.name, timeout, p.stderr.tail(2<<10))
	}
	return p.exitCode()
}

// exitCode is Wait's answer once done is closed.
func (p *Proc) exitCode() (int, error) {
	if p.err != nil {
		return -1, fmt.Errorf("wait for %s: %w", p.name, p.err)
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return p.state.ExitCode(), nil
}

// WaitForLine waits up to timeout for a line of stdout or stderr that
// contains substr, and returns it.
func (p *Proc) WaitForLine(timeout time.Duration, substr string) (string, error) {
	line, err := p.WaitForLineFunc(timeout, func(l string) bool { return strings.Contains(l, substr) })
	if err != nil {
		return "", fmt.Errorf("no line containing %q: %w", substr, err)
	}
	return line, nil
}

// WaitForLineFunc waits up to timeout for a line of stdout or stderr for
// which match returns true, and returns it. Lines already written count. It
// is woken by each write, and returns early with an error if the process
// exits without writing such a line.
func (p *Proc) WaitForLineFunc(timeout time.Duration, match func(line string) bool) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	streams := [2]*stream{p.stdout, p.stderr}
	var offs [2]int
	for {
		var (
			changed [2]<-chan struct{}
			ended   = true
		)
		for i, s := range streams {
			line, found, ch, eof := s.scan(&offs[i], match)
			if found {
				return line, nil
			}
			changed[i], ended = ch, ended && eof
		}
		if ended {
			<-p.done // closed right after the streams end
			code, _ := p.exitCode()
			return "", fmt.Errorf("%s exited (code %d) without writing it; stderr ends:\n%s", p.name, code, p.stderr.tail(2<<10))
		}
		select {
		case <-changed[0]:
		case <-changed[1]:
		case <-t.C:
			return "", fmt.Errorf("%s wrote no such line in %s; stderr ends:\n%s", p.name, timeout, p.stderr.tail(2<<10))
		}
	}
}
