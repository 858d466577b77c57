package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/dburl"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/migrations"
	"github.com/ferryq/ferry/outbox"
)

const hookSecret = "chaos-hook-secret"

// cluster is a Postgres of the suite's own, so that restarting it disturbs
// nobody else.
type cluster struct {
	bin, dir string
	port     int
}

func (c *cluster) url(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db)
}

func asPostgres(args ...string) *exec.Cmd {
	return exec.Command("runuser", append([]string{"-u", "postgres", "--"}, args...)...)
}

// startCluster initdb's a cluster owned by the postgres user (Postgres
// refuses to run as root) on a free port. It needs root, Debian's server
// binaries and the postgres user.
func startCluster() (*cluster, error) {
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
	c := &cluster{bin: filepath.Dir(bins[len(bins)-1])}
	if c.dir, err = os.MkdirTemp("", "ferry-chaos-pg-"); err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(c.dir, uid, gid); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if out, err := asPostgres(filepath.Join(c.bin, "initdb"), "-D", filepath.Join(c.dir, "data"), "-A", "trust", "-U", "postgres").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, lastLine(out))
	}
	return c, c.pgctl("start")
}

func (c *cluster) pgctl(action string) error {
	args := []string{filepath.Join(c.bin, "pg_ctl"), "-D", filepath.Join(c.dir, "data"), "-l", filepath.Join(c.dir, "log"), "-w", "-t", "60",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off", c.port, c.dir)}
	if action != "start" {
		args = append(args, "-m", "fast")
	}
	if out, err := asPostgres(append(args, action)...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl %s: %v: %s", action, err, lastLine(out))
	}
	return nil
}

func (c *cluster) stop() {
	_ = c.pgctl("stop")
	_ = os.RemoveAll(c.dir)
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// proc is one chaos worker process.
type proc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	killed atomic.Int64 // unix nanos of a SIGKILL, 0 if none
}

type suite struct {
	bin, url, cfgFile string
	pool              *pgxpool.Pool
	mu                sync.Mutex
	procs             []*proc
	maxHolders        atomic.Int32
	faults            []faultResult
	notes             []string
}

type faultResult struct {
	name    string
	at      time.Time
	gap     time.Duration // from the fault to a leader's runnables running again
	skipped string
}

func (s *suite) start() (*proc, error) {
	p := &proc{done: make(chan struct{})}
	p.cmd = exec.Command(s.bin)
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+s.url, "FERRY_CONFIG="+s.cfgFile, "CHAOS_HOOK_SECRET="+hookSecret, "FERRY_LOG_FORMAT=json")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	logf, err := os.CreateTemp("", "ferry-chaos-worker-*.log")
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

func (s *suite) live() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*proc
	for _, p := range s.procs {
		select {
		case <-p.done:
		default:
			out = append(out, p)
		}
	}
	return out
}

func (s *suite) leaderProc(ctx context.Context) (*proc, *election.Holder, error) {
	h, err := election.CurrentHolder(ctx, s.pool, election.KeyElection)
	if err != nil || h == nil || h.PID == nil {
		return nil, h, fmt.Errorf("no leader (%v)", err)
	}
	for _, p := range s.live() {
		if p.cmd.Process.Pid == *h.PID {
			return p, h, nil
		}
	}
	return nil, h, fmt.Errorf("leader pid %d is not one of ours", *h.PID)
}

// waitLeaderRun returns when a leader run started after t; the gap is from t.
func (s *suite) waitLeaderRun(ctx context.Context, t time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var started *time.Time
		err := s.pool.QueryRow(ctx, "SELECT min(started_at) FROM chaos_leader_run WHERE started_at > $1", t).Scan(&started)
		if err == nil && started != nil {
			return started.Sub(t), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("no leader runnable started within %s", timeout)
}

func run(ctx context.Context, serverURL string, steady time.Duration) (bool, error) {
	s := &suite{}
	var cl *cluster
	admin := serverURL
	if c, err := startCluster(); err != nil {
		s.notes = append(s.notes, "Postgres restart skipped: "+err.Error())
		fmt.Println("chaos: using", dburl.Redact(serverURL), "-", s.notes[0])
	} else {
		cl = c
		defer cl.stop()
		admin = cl.url("postgres")
		fmt.Println("chaos: a cluster of its own on port", cl.port)
	}

	// A fresh database, migrated, with the oracle's tables.
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return false, fmt.Errorf("connect: %s", dburl.Redact(err.Error()))
	}
	name := fmt.Sprintf("ferry_chaos_%d", time.Now().UnixNano())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return false, err
	}
	defer func() {
		c2, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c2.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c2.Close(context.Background())
		}
	}()
	conn.Close(ctx)
	if s.url, err = dburl.WithDatabase(admin, name); err != nil {
		return false, err
	}
	if s.pool, err = pgxpool.New(ctx, s.url); err != nil {
		return false, err
	}
	defer s.pool.Close()
	m, err := migrations.New(s.pool, nil)
	if err != nil {
		return false, err
	}
	if _, err := m.Up(ctx); err != nil {
		return false, err
	}
	if _, err := s.pool.Exec(ctx, `
		CREATE TABLE chaos_effect (key text PRIMARY KEY, job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE TABLE chaos_received (event_id text PRIMARY KEY, arrivals int NOT NULL DEFAULT 1);
		CREATE TABLE chaos_leader_run (id bigserial PRIMARY KEY, pid int NOT NULL, term bigint NOT NULL,
			started_at timestamptz NOT NULL, stopped_at timestamptz);`); err != nil {
		return false, err
	}

	// The receiver: a real HTTP server that records each event id once
	// (UNIQUE) and counts every arrival.
	recv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _, err := outbox.Verify(r, []byte(hookSecret), 0)
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if _, err := s.pool.Exec(r.Context(), `INSERT INTO chaos_received (event_id) VALUES ($1)
			ON CONFLICT (event_id) DO UPDATE SET arrivals = chaos_received.arrivals + 1`, id); err != nil {
			http.Error(w, "database", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false, err
	}
	go func() { _ = recv.Serve(ln) }()
	defer recv.Close()

	dir, err := os.MkdirTemp("", "ferry-chaos-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(dir)
	s.cfgFile = filepath.Join(dir, "ferry.yaml")
	cfg := fmt.Sprintf(`schedules:
  - {id: chaos-tick, name: Chaos tick, every: 1s, kind: ferry.noop, overlap: allow}
outbox:
  routes:
    - {topic: chaos.event, name: receiver, url: "http://%s/hook", secret_env: CHAOS_HOOK_SECRET, timeout: 5s}
`, ln.Addr())
	if err := os.WriteFile(s.cfgFile, []byte(cfg), 0o600); err != nil {
		return false, err
	}
	s.bin = filepath.Join(dir, "worker")
	if out, err := exec.Command("go", "build", "-o", s.bin, "./internal/chaos/worker").CombinedOutput(); err != nil {
		return false, fmt.Errorf("build worker: %v: %s", err, out)
	}
	for range 3 {
		if _, err := s.start(); err != nil {
			return false, err
		}
	}
	defer func() {
		for _, p := range s.live() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}()
	if _, err := s.waitLeaderRun(ctx, time.Time{}, 30*time.Second); err != nil {
		return false, err
	}
	windowStart := time.Now()

	// The sampler and the load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.sample(loadCtx) })
	var jobKeys, messages atomic.Int64
	wg.Go(func() { s.produceJobs(loadCtx, &jobKeys) })
	wg.Go(func() { s.produceMessages(loadCtx, &messages) })

	time.Sleep(steady)
	faults := []struct {
		name string
		do   func() error
	}{
		{"kill -9 of the leader", func() error {
			p, _, err := s.leaderProc(ctx)
			if err != nil {
				return err
			}
			p.killed.Store(time.Now().UnixNano())
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
			_, err = s.start()
			return err
		}},
		{"pg_terminate_backend of the lock connection", func() error {
			_, h, err := s.leaderProc(ctx)
			if err != nil {
				return err
			}
			_, err = s.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", h.BackendPID)
			return err
		}},
		{"rolling SIGTERM restart of all workers", func() error {
			for _, p := range s.live() {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-p.done:
				case <-time.After(40 * time.Second):
					return errors.New("a worker did not stop within 40s of SIGTERM")
				}
				if _, err := s.start(); err != nil {
					return err
				}
				time.Sleep(time.Second)
			}
			return nil
		}},
		{"pg_terminate_backend of every ferry backend", func() error {
			_, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name LIKE 'ferry%' AND pid <> pg_backend_pid()`)
			return err
		}},
		{"Postgres restart", func() error {
			if cl == nil {
				return errSkip
			}
			return cl.pgctl("restart")
		}},
	}
	for _, f := range faults {
		at := time.Now()
		err := f.do()
		if errors.Is(err, errSkip) {
			s.faults = append(s.faults, faultResult{name: f.name, at: at, skipped: s.notes[0]})
			continue
		}
		if err != nil {
			stopLoad()
			wg.Wait()
			return false, fmt.Errorf("%s: %w", f.name, err)
		}
		gap, err := s.waitLeaderRun(ctx, at, 60*time.Second)
		if err != nil {
			stopLoad()
			wg.Wait()
			return false, fmt.Errorf("%s: %w", f.name, err)
		}
		s.faults = append(s.faults, faultResult{name: f.name, at: at, gap: gap})
		fmt.Printf("chaos: %s: a leader runs again after %s\n", f.name, gap.Round(time.Millisecond))
		time.Sleep(steady)
	}
	stopLoad()
	wg.Wait()
	windowEnd := time.Now()

	// Drain: every job worked, every message delivered.
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		var jobsLeft, msgsLeft int
		_ = s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'chaos.effect' AND state <> 'completed'`).Scan(&jobsLeft)
		_ = s.pool.QueryRow(ctx, `SELECT count(*) FROM ferry_outbox WHERE status <> 'delivered'`).Scan(&msgsLeft)
		if jobsLeft == 0 && msgsLeft == 0 {
			break
		}
		// Jobs left running by a killed worker stand in River's rescuer's
		// queue for an hour; the suite rescues them now, as it would.
		_, _ = s.pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now(), attempted_by = NULL
			WHERE state = 'running' AND attempted_at < now() - interval '10 seconds'`)
		_, _ = s.pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() WHERE state IN ('retryable', 'available') AND scheduled_at > now()`)
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range s.live() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range s.live() {
		select {
		case <-p.done:
		case <-time.After(40 * time.Second):
		}
	}
	return s.oracle(ctx, jobKeys.Load(), messages.Load(), windowStart, windowEnd), nil
}

var errSkip = errors.New("skipped")

func (s *suite) sample(ctx context.Context) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		var n int32
		err := s.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = $1::bigint::oid
			AND objsubid = 1 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, election.KeyElection).Scan(&n)
		if err == nil && n > s.maxHolders.Load() {
			s.maxHolders.Store(n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// produceJobs inserts chaos.effect jobs, each in a transaction of its own,
// at about 50 a second; a failed insert (the database restarting) is
// retried with the same key until it commits.
func (s *suite) produceJobs(ctx context.Context, n *atomic.Int64) {
	ins, err := jobs.NewInserter(s.pool)
	if err != nil {
		return
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		key := fmt.Sprintf("job-%d", n.Load()+1)
		// The unique key makes a retry after an ambiguous failure (the
		// commit may have landed) return the job already inserted.
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			_, err := ins.InsertTx(ctx, tx, jobs.RawArgs{KindName: "chaos.effect", JSON: []byte(`{"key":"` + key + `"}`)}, jobs.WithUniqueKey(nil, key))
			return err
		})
		if err == nil {
			n.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// produceMessages writes outbox messages with plain SQL at about 50 a
// second, each with a dedup key, so a retried write cannot double one.
func (s *suite) produceMessages(ctx context.Context, n *atomic.Int64) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		key := fmt.Sprintf("msg-%d", n.Load()+1)
		_, err := s.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, dedup_key) VALUES ('chaos.event', '{}', $1)
			ON CONFLICT (topic, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING`, key)
		if err == nil {
			n.Add(1)
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

type check struct {
	name, result string
	ok           bool
}

func (s *suite) oracle(ctx context.Context, jobKeys, messages int64, from, to time.Time) bool {
	var checks []check
	add := func(name string, ok bool, format string, args ...any) {
		checks = append(checks, check{name: name, ok: ok, result: fmt.Sprintf(format, args...)})
	}
	add("holders of the lock, sampled every 100 ms", s.maxHolders.Load() <= 1, "max %d", s.maxHolders.Load())

	// Leader runs never overlap: each starts after the previous one ended
	// (its recorded stop, or the moment its process was killed).
	killedAt := map[int]time.Time{}
	for _, p := range s.procs {
		if k := p.killed.Load(); k != 0 {
			killedAt[p.cmd.Process.Pid] = time.Unix(0, k)
		}
	}
	rows, err := s.pool.Query(ctx, "SELECT pid, term, started_at, stopped_at FROM chaos_leader_run ORDER BY started_at")
	overlaps, runs, unended := 0, 0, 0
	if err == nil {
		var prevEnd time.Time
		for rows.Next() {
			var (
				pid       int
				term      int64
				start     time.Time
				stoppedAt *time.Time
			)
			if rows.Scan(&pid, &term, &start, &stoppedAt) != nil {
				break
			}
			runs++
			if !prevEnd.IsZero() && start.Before(prevEnd) {
				overlaps++
			}
			switch {
			case stoppedAt != nil:
				prevEnd = *stoppedAt
			case !killedAt[pid].IsZero():
				prevEnd = killedAt[pid]
			default:
				unended++
				prevEnd = start
			}
		}
		rows.Close()
	}
	add("leader runs overlapping in time", overlaps == 0, "%d overlaps in %d runs (%d without a recorded end)", overlaps, runs, unended)

	// The truth is what committed: a producer whose statement committed
	// just as its context ended (or as the server went away) never counted
	// it, so the database's rows, not the producers' counters, are the set
	// every effect is checked against.
	var jobs, effects, missing int64
	_ = s.pool.QueryRow(ctx, "SELECT count(DISTINCT args->>'key') FROM river_job WHERE kind = 'chaos.effect'").Scan(&jobs)
	_ = s.pool.QueryRow(ctx, "SELECT count(*) FROM chaos_effect").Scan(&effects)
	_ = s.pool.QueryRow(ctx, `SELECT count(DISTINCT j.args->>'key') FROM river_job j WHERE j.kind = 'chaos.effect'
		AND NOT EXISTS (SELECT 1 FROM chaos_effect e WHERE e.key = j.args->>'key')`).Scan(&missing)
	add("job effects exactly once", effects == jobs && missing == 0 && jobs >= jobKeys,
		"%d jobs committed (%d acknowledged to the producer), %d effects, %d missing (UNIQUE key: never two)", jobs, jobKeys, effects, missing)

	var committed, received, lost, redeliveries int64
	_ = s.pool.QueryRow(ctx, "SELECT count(*) FROM ferry_outbox").Scan(&committed)
	_ = s.pool.QueryRow(ctx, "SELECT count(*), coalesce(sum(arrivals - 1), 0) FROM chaos_received").Scan(&received, &redeliveries)
	_ = s.pool.QueryRow(ctx, `SELECT count(*) FROM ferry_outbox o WHERE NOT EXISTS (SELECT 1 FROM chaos_received r WHERE r.event_id = o.id::text)`).Scan(&lost)
	add("outbox effects exactly once", received == committed && lost == 0 && committed >= messages,
		"%d messages committed (%d acknowledged), %d received once each, %d lost, %d wire redeliveries absorbed", committed, messages, received, lost, redeliveries)

	var ticks, gaps int64
	var first, last *time.Time
	_ = s.pool.QueryRow(ctx, `SELECT count(*), min(tick_at), max(tick_at) FROM ferry_periodic_tick WHERE schedule_id = 'chaos-tick' AND tick_at BETWEEN $1 AND $2`, from, to).Scan(&ticks, &first, &last)
	if first != nil && last != nil {
		gaps = int64(last.Sub(*first)/time.Second) + 1 - ticks
	}
	add("ticks in the window recorded exactly once", first != nil && gaps == 0, "%d ticks from %s to %s, %d missing", ticks, fmtT(first), fmtT(last), gaps)

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nfault\tfailover gap")
	for _, f := range s.faults {
		g := f.gap.Round(time.Millisecond).String()
		if f.skipped != "" {
			g = "skipped: " + f.skipped
		}
		fmt.Fprintf(tw, "%s\t%s\n", f.name, g)
	}
	fmt.Fprintln(tw, "\ncheck\tresult\tverdict")
	ok := true
	for _, c := range checks {
		v := "ok"
		if !c.ok {
			v, ok = "VIOLATED", false
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.name, c.result, v)
	}
	_ = tw.Flush()
	failed := 0
	for _, c := range checks {
		if !c.ok {
			failed++
		}
	}
	fmt.Printf("chaos: %d passed, %d failed\n", len(checks)-failed, failed)
	return ok
}

func fmtT(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("15:04:05")
}
