// Package pgbouncer starts Debian's PgBouncer in transaction mode in front
// of the test Postgres, for the tests of what ferry promises through a
// transaction pooler.
//
// Each Start runs a PgBouncer process of its own, on a free port of
// 127.0.0.1, that passes every database of the server through
// (pool_mode = transaction, so consecutive transactions of one client may
// run on different server sessions, and session state does not follow the
// client). The binary is Debian's package; `go tool task pgbouncer` (a step
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
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatalf("pgbouncer: database URL: %v", err)
	}
	bin := Binary
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("pgbouncer"); err != nil {
			tb.Fatalf("pgbouncer: not installed (%s): run `go tool task pgbouncer`", Binary)
		}
	}
	port := freePort(tb)
	dir := tb.TempDir()
	// PgBouncer will not run as root; as root it is told to switch to the
	// postgres user (-u), which must read its files.
	var runAs []string
	if os.Geteuid() == 0 {
		runAs = []string{"-u", runUser(tb)}
		if err := os.Chmod(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	pass, _ := u.User.Password()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	users := write("userlist.txt", fmt.Sprintf("%q %q\n", u.User.Username(), pass))
	ini := write("pgbouncer.ini", fmt.Sprintf(`[databases]
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
`, u.Hostname(), cmpPort(u.Port()), port, users))
	cmd := exec.Command(bin, append(runAs, ini)...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		tb.Fatalf("pgbouncer: start: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			break
		}
		select {
		case err := <-exited:
			tb.Fatalf("pgbouncer: exited at start (%v): %s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pgbouncer: not listening on %s after 10s: %s", addr, logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	u.Host = addr
	return u.String()
}

func cmpPort(p string) string {
	if p == "" {
		return "5432"
	}
	return p
}

// runUser is the user PgBouncer switches to when started as root.
func runUser(tb testing.TB) string {
	for _, name := range []string{"postgres", "nobody"} {
		if _, err := user.Lookup(name); err == nil {
			return name
		}
	}
	tb.Fatal("pgbouncer: running as root, and neither user postgres nor nobody exists to run PgBouncer as")
	return ""
}

func freePort(tb testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
