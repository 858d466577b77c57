package fleet

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// tailSize bounds the output quoted in an error.
const tailSize = 2 << 10

// inherited are the variables a child takes from this process's environment;
// everything else it gets must be passed to Start.
var inherited = []string{"PATH", "HOME", "TMPDIR"}

// Proc is a running (or finished) process started by Start or Fleet.Start.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	out    *notifier // woken by every write to stdout or stderr
	stdout *stream
	stderr *stream

	done  chan struct{}    // closed once the process is reaped and its output read
	state *os.ProcessState // set before done is closed
	err   error            // a failure to wait, set before done is closed
}

// Start starts bin with args in a process group of its own. env (NAME=value
// entries) is added to PATH, HOME and TMPDIR from this process's environment;
// later entries win. stdin may be nil (empty).
func Start(bin string, env []string, stdin io.Reader, args ...string) (*Proc, error) {
	return start(newNotifier(), bin, env, stdin, args)
}

func start(out *notifier, bin string, env []string, stdin io.Reader, args []string) (*Proc, error) {
	cmd := exec.Command(bin, args...)
	for _, name := range inherited {
		if v, ok := os.LookupEnv(name); ok {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	p := &Proc{cmd: cmd, out: out, stdout: &stream{n: out}, stderr: &stream{n: out}, done: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, p.stdout, p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A grandchild that keeps the pipes open must not hold Wait forever.
	cmd.WaitDelay = 5 * time.Second

	// Linux sends the parent-death signal when the thread that forked the
	// child exits, not when the process does, and Go picks the thread. The
	// child is started and waited for on one locked thread, which therefore
	// outlives it, unless the whole process dies.
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
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p.name = fmt.Sprintf("%s[%d]", filepath.Base(bin), cmd.Process.Pid)
	return p, nil
}

// String names the process: the binary's base name and its pid.
func (p *Proc) String() string { return p.name }

// Pid is the process id, which is also its process group id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Stdout returns what the process has written to stdout so far.
func (p *Proc) Stdout() string { return p.stdout.String() }

// Stderr returns what the process has written to stderr so far.
func (p *Proc) Stderr() string { return p.stderr.String() }

// Tail returns at most the last n bytes of stdout and of stderr, each
// starting at a line boundary when there is one.
func (p *Proc) Tail(n int) (stdout, stderr string) { return p.stdout.tail(n), p.stderr.tail(n) }

// Done is closed once the process has exited and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited (and its output is read).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ProcessState is the exited process's state, nil while it runs.
func (p *Proc) ProcessState() *os.ProcessState {
	if !p.Exited() {
		return nil
	}
	return p.state
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
	if p.Exited() {
		return os.ErrProcessDone
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	return nil
}

// Wait waits up to timeout for the process to exit and returns its exit
// code: the status it exited with, or 128 plus the signal number when a
// signal ended it. The error is non-nil when it is still running after
// timeout.
func (p *Proc) Wait(timeout time.Duration) (exitCode int, err error) {
	if p.Exited() {
		return p.exitCode()
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return -1, fmt.Errorf("%s still running after %s; stderr ends:\n%s", p.name, timeout, p.stderr.tail(tailSize))
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
	var offs [2]int
	for {
		changed := p.out.changed()
		line, found, ended := p.scan(&offs, match)
		if found {
			return line, nil
		}
		if ended {
			<-p.done // closed right after the streams end
			code, _ := p.exitCode()
			return "", fmt.Errorf("%s exited (code %d) without writing it; stderr ends:\n%s", p.name, code, p.stderr.tail(tailSize))
		}
		select {
		case <-changed:
		case <-t.C:
			return "", fmt.Errorf("%s wrote no such line in %s; stderr ends:\n%s", p.name, timeout, p.stderr.tail(tailSize))
		}
	}
}

// scan reads stdout, then stderr, from offs on for a line that matches, and
// says whether both have ended.
func (p *Proc) scan(offs *[2]int, match func(string) bool) (line string, found, ended bool) {
	ended = true
	for i, s := range [2]*stream{p.stdout, p.stderr} {
		line, found, eof := s.scan(&offs[i], match)
		if found {
			return line, true, false
		}
		ended = ended && eof
	}
	return "", false, ended
}

// offsets is how much of stdout and stderr has been written so far.
func (p *Proc) offsets() [2]int { return [2]int{p.stdout.len(), p.stderr.len()} }
