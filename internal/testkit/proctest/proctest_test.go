package proctest_test

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const hello = "./internal/testkit/proctest/testdata/hello"

func TestBuild(t *testing.T) {
	t.Parallel()

	t.Run("BuildsOnceAndRuns", func(t *testing.T) {
		t.Parallel()
		bins := proctest.Build(t, hello)
		again := proctest.Build(t, hello)
		require.Equal(t, bins, again, "a second Build returns the cached binary")
		stdout, stderr, code := proctest.Run(t, bins[hello], nil, nil, "a", "b")
		require.Zero(t, code, stderr)
		require.Equal(t, "hello a b\n", stdout)
	})

	t.Run("FailsLoudly", func(t *testing.T) {
		t.Parallel()
		msg := fatalOf(t, func(tb testing.TB) { proctest.Build(tb, "./no/such/package") })
		require.Contains(t, msg, "proctest: build ./no/such/package")
		require.Contains(t, msg, "no/such/package", "the go command's output is included")
	})

	t.Run("NotAMainPackage", func(t *testing.T) {
		t.Parallel()
		msg := fatalOf(t, func(tb testing.TB) { proctest.Build(tb, "./internal/config") })
		require.Contains(t, msg, "proctest: build ./internal/config")
	})
}

func TestStart(t *testing.T) {
	t.Parallel()

	t.Run("WaitForLineThenKill", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, "sh", nil, "-c", "echo ready; exec sleep 30")
		line, err := p.WaitForLine(10*time.Second, "ready")
		require.NoError(t, err)
		require.Equal(t, "ready", line)
		require.NoError(t, p.Kill())
		code, err := p.Wait(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, 128+int(syscall.SIGKILL), code)
		require.ErrorIs(t, p.Kill(), os.ErrProcessDone)
		require.ErrorIs(t, p.Signal(syscall.SIGTERM), os.ErrProcessDone)
	})

	t.Run("ExitCodeAndOutput", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, "sh", nil, "-c", "echo out; echo err >&2; exit 3")
		code, err := p.Wait(10 * time.Second)
		require.NoError(t, err)
		require.Equal(t, 3, code)
		require.Equal(t, "out\n", p.Stdout())
		require.Equal(t, "err\n", p.Stderr())
		require.NotNil(t, p.ProcessState())
	})

	t.Run("SignalIsHandled", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, "sh", nil, "-c", `trap 'echo got TERM; exit 0' TERM; echo ready; while :; do sleep 0.05; done`)
		_, err := p.WaitForLine(10*time.Second, "ready")
		require.NoError(t, err)
		require.NoError(t, p.Signal(syscall.SIGTERM))
		_, err = p.WaitForLine(10*time.Second, "got TERM")
		require.NoError(t, err)
		code, err := p.Wait(10 * time.Second)
		require.NoError(t, err)
		require.Zero(t, code)
	})

	t.Run("WaitTimesOut", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, "sh", nil, "-c", "echo ready; exec sleep 30")
		_, err := p.Wait(50 * time.Millisecond)
		require.ErrorContains(t, err, "still running")
		require.Nil(t, p.ProcessState())
	})

	t.Run("WaitForLineTimesOut", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, "sh", nil, "-c", "echo ready; exec sleep 30")
		start := time.Now()
		_, err := p.WaitForLine(100*time.Millisecond, "never")
		require.ErrorContains(t, err, "wrote no such line")
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	})

	t.Run("WaitForLineReturnsWhenTheProcessExits", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, "sh", nil, "-c", "echo one; exit 4")
		// Waited out, the timeout would end with "wrote no such line".
		_, err := p.WaitForLine(30*time.Second, "two")
		require.ErrorContains(t, err, "exited (code 4)", "no waiting out the timeout")
	})

	t.Run("WaitForLineJoinsWrites", func(t *testing.T) {
		t.Parallel()
		// One line in two writes, then a last line without a newline.
		p := proctest.Start(t, "sh", nil, "-c", `printf 'par'; sleep 0.1; printf 'tial\nlast'`)
		line, err := p.WaitForLineFunc(10*time.Second, func(l string) bool { return strings.HasPrefix(l, "par") })
		require.NoError(t, err)
		require.Equal(t, "partial", line)
		line, err = p.WaitForLine(10*time.Second, "last")
		require.NoError(t, err)
		require.Equal(t, "last", line)
	})

	t.Run("CleanupKillsTheGroup", func(t *testing.T) {
		t.Parallel()
		var grandchild int
		t.Run("Inner", func(t *testing.T) {
			p := proctest.Start(t, "sh", nil, "-c", "sleep 30 & echo $!; wait")
			line, err := p.WaitForLineFunc(10*time.Second, func(string) bool { return true })
			require.NoError(t, err)
			grandchild, err = strconv.Atoi(line)
			require.NoError(t, err)
		})
		// The grandchild was killed with the group; it is gone or a zombie
		// waiting for init.
		require.Eventually(t, func() bool { return dead(grandchild) }, 10*time.Second, 20*time.Millisecond)
	})
}

func TestStart_Environment(t *testing.T) {
	// Not parallel: it sets the test process's environment.
	t.Setenv("DATABASE_URL", "postgres://from-the-shell")
	stdout, _, code := proctest.Run(t, "sh", []string{"FOO=bar", "FOO=baz"}, nil, "-c", `echo "$FOO|$DATABASE_URL|${PATH:+path}"`)
	require.Zero(t, code)
	require.Equal(t, "baz||path\n", stdout, "later entries win; the test's DATABASE_URL is not inherited; PATH is")
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("Stdin", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := proctest.Run(t, "cat", nil, strings.NewReader("x\ny"))
		require.Zero(t, code)
		require.Equal(t, "x\ny", stdout)
		require.Empty(t, stderr)
	})

	t.Run("ExitCode", func(t *testing.T) {
		t.Parallel()
		_, stderr, code := proctest.Run(t, "sh", nil, nil, "-c", "echo no >&2; exit 2")
		require.Equal(t, 2, code)
		require.Equal(t, "no\n", stderr)
	})
}

// fatalOf runs fn with a testing.TB whose Fatalf records the message and
// ends fn, and returns the message ("" if fn did not fail).
func fatalOf(t *testing.T, fn func(tb testing.TB)) string {
	t.Helper()
	tb := &recordingTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(tb)
	}()
	<-done
	require.NotEmpty(t, tb.fatal, "fn did not fail")
	return tb.fatal
}

type recordingTB struct {
	testing.TB
	fatal string
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// dead reports whether pid is gone or a zombie.
func dead(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
