// Package pgcluster starts Postgres clusters of a test's or a suite's own
// (Debian's server binaries, run as the postgres user, on free ports of
// 127.0.0.1), so that restarting or failing one over disturbs nobody else:
// one alone (Start), or a primary with a synchronous streaming standby
// (StartReplicated) made with pg_basebackup, for a primary failover.
//
// It needs root (Postgres will not run as root, so each cluster runs as
// the postgres user through runuser), Debian's server package and the
// postgres user, which `go tool task db` installs. Callers that cannot
// start a cluster report why; they never pretend one ran.
package pgcluster

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Cluster is one Postgres cluster: its binaries, its directory (data and
// log) and its port.
type Cluster struct {
	Bin, Dir string
	Port     int
	// extra is what the cluster is started with besides the port.
	extra []string
}

// URL is a URL of database db on the cluster, as the postgres superuser.
func (c *Cluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Addr is the cluster's host:port.
func (c *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port)) }

// asPostgres is args run as the postgres user, from the root directory:
// the user may not be allowed into the test's working directory (a clone
// under a home of mode 700), and psql then warns that it could not change
// to it.
func asPostgres(args ...string) *exec.Cmd {
	cmd := exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
	cmd.Dir = "/"
	return cmd
}

// prepare finds the binaries and makes a directory the postgres user owns,
// and a free port.
func prepare() (*Cluster, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not root: cannot run initdb and pg_ctl as the postgres user")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("no postgres system user")
	}
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	if len(bins) == 0 {
		return nil, errors.New("no Postgres server binaries in /usr/lib/postgresql")
	}
	sort.Strings(bins)
	c := &Cluster{Bin: filepath.Dir(bins[len(bins)-1])}
	if c.Dir, err = os.MkdirTemp("", "ferry-pg-"); err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(c.Dir, uid, gid); err != nil {
		_ = os.RemoveAll(c.Dir)
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = os.RemoveAll(c.Dir)
		return nil, err
	}
	c.Port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return c, nil
}

// Start initdb's a cluster on a free port and starts it.
func Start() (*Cluster, error) {
	c, err := prepare()
	if err != nil {
		return nil, err
	}
	if err := c.initdb(); err != nil {
		c.remove()
		return nil, err
	}
	if err := c.Ctl("start"); err != nil {
		c.remove()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) initdb() error {
	out, err := asPostgres(filepath.Join(c.Bin, "initdb"), "-D", filepath.Join(c.Dir, "data"), "-A", "trust", "-U", "postgres").CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb: %v: %s", err, lastLine(out))
	}
	return nil
}

// StandbyName is the standby's application_name, which the primary waits
// for (synchronous_standby_names).
const StandbyName = "ferry_standby"

// StartReplicated starts a primary and a streaming standby of it, made
// with pg_basebackup, that the primary commits to synchronously
// (synchronous_standby_names, synchronous_commit on): a commit the primary
// acknowledged is on the standby, so a failover to it loses none.
func StartReplicated() (primary, standby *Cluster, err error) {
	if primary, err = prepare(); err != nil {
		return nil, nil, err
	}
	if err := primary.initdb(); err != nil {
		primary.remove()
		return nil, nil, err
	}
	primary.extra = []string{"-c wal_level=replica", "-c max_wal_senders=5", "-c synchronous_standby_names=" + StandbyName}
	if err := primary.Ctl("start"); err != nil {
		primary.remove()
		return nil, nil, err
	}
	if standby, err = prepare(); err != nil {
		primary.Stop()
		return nil, nil, err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.Port, StandbyName)
	out, err := asPostgres(filepath.Join(standby.Bin, "pg_basebackup"), "-d", conninfo, "-D", filepath.Join(standby.Dir, "data"), "-R", "-X", "stream", "-c", "fast").CombinedOutput()
	if err != nil {
		primary.Stop()
		standby.remove()
		return nil, nil, fmt.Errorf("pg_basebackup: %v: %s", err, lastLine(out))
	}
	// After a promotion it is a primary with no standby: it must not wait
	// for one.
	standby.extra = []string{"-c synchronous_standby_names=", "-c hot_standby=on"}
	if err := standby.Ctl("start"); err != nil {
		primary.Stop()
		standby.remove()
		return nil, nil, err
	}
	// A standby catching up is not yet synchronous (the primary's commits
	// wait meanwhile): return once the primary says it is.
	if err := primary.waitSync(30 * time.Second); err != nil {
		primary.Stop()
		standby.Stop()
		return nil, nil, err
	}
	return primary, standby, nil
}

// waitSync waits until the primary's pg_stat_replication shows StandbyName
// streaming as its synchronous standby.
func (c *Cluster) waitSync(timeout time.Duration) error {
	q := fmt.Sprintf("SELECT sync_state FROM pg_stat_replication WHERE application_name = '%s' AND state = 'streaming'", StandbyName)
	deadline := time.Now().Add(timeout)
	var last string
	for {
		// The answer is standard output alone; a warning goes with the
		// error.
		cmd := asPostgres(filepath.Join(c.Bin, "psql"), "-h", "127.0.0.1", "-p", strconv.Itoa(c.Port), "-U", "postgres", "-d", "postgres", "-Atc", q)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		last = strings.TrimSpace(string(out))
		if err == nil && last == "sync" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: the standby is not synchronous after %s (pg_stat_replication: %q; %s)", timeout, last, strings.TrimSpace(stderr.String()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Ctl runs pg_ctl action (start, stop, restart) on the cluster, waiting
// for it to finish; stop and restart are "fast".
func (c *Cluster) Ctl(action string) error { return c.ctl(action, "fast") }

// Crash stops the cluster at once, as a crash of its machine would
// (pg_ctl stop -m immediate: no checkpoint, sessions cut).
func (c *Cluster) Crash() error { return c.ctl("stop", "immediate") }

// Promote makes a standby the primary and waits until it accepts writes.
func (c *Cluster) Promote() error { return c.ctl("promote", "") }

func (c *Cluster) ctl(action, mode string) error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off %s", c.Port, c.Dir, strings.Join(c.extra, " "))
	args := []string{filepath.Join(c.Bin, "pg_ctl"), "-D", filepath.Join(c.Dir, "data"), "-l", filepath.Join(c.Dir, "log"), "-w", "-t", "60", "-o", opts}
	if mode != "" && action != "start" && action != "promote" {
		args = append(args, "-m", mode)
	}
	if out, err := asPostgres(append(args, action)...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %v: %s", action, err, lastLine(out))
	}
	return nil
}

// Stop stops the cluster, if it runs, and removes its directory.
func (c *Cluster) Stop() {
	_ = c.Ctl("stop")
	c.remove()
}

func (c *Cluster) remove() { _ = os.RemoveAll(c.Dir) }

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// MultiHostURL rewrites the Postgres URL u (of any one of the clusters) to
// name every cluster's address, in order, and to want the one that takes
// writes (target_session_attrs=read-write), as a client that follows a
// failover does.
func MultiHostURL(u string, clusters ...*Cluster) (string, error) {
	at := strings.Index(u, "@")
	if at < 0 {
		return "", errors.New("pgcluster: URL has no user@")
	}
	rest := u[at+1:]
	slash := strings.IndexAny(rest, "/?")
	if slash < 0 {
		slash = len(rest)
	}
	addrs := make([]string, len(clusters))
	for i, c := range clusters {
		addrs[i] = c.Addr()
	}
	out := u[:at+1] + strings.Join(addrs, ",") + rest[slash:]
	sep := "?"
	if strings.Contains(out, "?") {
		sep = "&"
	}
	return out + sep + "target_session_attrs=read-write", nil
}
