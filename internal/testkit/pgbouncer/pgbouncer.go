// Package pgbouncer starts Debian's PgBouncer in transaction mode in front
// of the test Postgres, for the tests of what ferry promises through a
// transaction pooler.
//
// Each Start runs a PgBouncer process of its own, on a free port of
// 127.0.0.1, that passes every database of the server through
// (pool_mode = transaction, so consecutive transactions of one client may
// run on different server sessions, and session state does not follow the
// client). server_login_retry is 1 s, not PgBouncer's 15 s: after a
// Postgres restart, the default keeps every client waiting 15 s after the
// first failed login (docs/operations.md). The binary is Debian's package; `go tool task pgbouncer` (a step
// of `go tool task test`) installs it. A test that cannot start it fails
// with the reason; it never skips.
package pgbouncer

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Binary is where Debian's package puts PgBouncer.
const Binary = "/usr/sbin/pgbouncer"

// Start runs PgBouncer in transaction mode in front of the server that
// dbURL names, and returns dbURL with its host and port replaced by
// PgBouncer's. It is stopped when the test ends.
func Start(tb testing.TB, dbURL string) string {
	tb.Helper()
	u, stop, err := Run(dbURL, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return u
}

// Run is Start for a program that is not a test (the bench): PgBouncer's
// files go in dir, and stop ends it.
func Run(dbURL, dir string) (proxyURL string, stop func(), err error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", nil, fmt.Errorf("pgbouncer: database URL: %w", err)
	}
	bin := Binary
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			return "", nil, fmt.Errorf("pgbouncer: not installed (%s): run `go tool task pgbouncer`", Binary)
		}
	}
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	// PgBouncer will not run as root; as root it is told to switch to the
	// postgres user (-u), which must read its files.
	var runAs []string
	if os.Geteuid() == 0 {
		name, err := runUser()
		if err != nil {
			return "", nil, err
		}
		runAs = []string{"-u", name}
		if err := os.Chmod(dir, 0o755); err != nil {
			return "", nil, err
		}
	}
	pass, _ := u.User.Password()
	users := filepath.Join(dir, "userlist.txt")
	if err := os.WriteFile(users, fmt.Appendf(nil, "%q %q\n", u.User.Username(), pass), 0o644); err != nil {
		return "", nil, err
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	err = os.WriteFile(ini, fmt.Appendf(nil, `[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
ignore_startup_parameters = extra_float_digits
server_check_delay = 0
server_login_retry = 1
`, u.Hostname(), cmpPort(u.Port()), port, users), 0o644)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(bin, append(runAs, ini)...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			return "", nil, fmt.Errorf("pgbouncer: exited at start (%v): %s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("pgbouncer: not listening on %s after 10s: %s", addr, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	u.Host = addr
	return u.String(), stop, nil
}

// syncBuffer collects PgBouncer's output for an error message.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func cmpPort(p string) string {
	if p == "" {
		return "5432"
	}
	return p
}

// runUser is the user PgBouncer switches to when started as root.
func runUser() (string, error) {
	for _, name := range []string{"postgres", "nobody"} {
		if _, err := user.Lookup(name); err == nil {
			return name, nil
		}
	}
	return "", fmt.Errorf("pgbouncer: running as root, and neither user postgres nor nobody exists to run PgBouncer as")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
