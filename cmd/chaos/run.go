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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/redact"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/internal/testkit/scratchdb"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
)

const (
	hookSecret = "chaos-hook-secret"
	// workerPkg is the suite's worker, built for each run.
	workerPkg = "./cmd/chaos/chaosworker"
)

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

type suite struct {
	bin, url, cfgFile string
	pool              *pgxpool.Pool
	workers           *fleet.Fleet
	killedAt          map[int]time.Time // by pid: when the suite sent SIGKILL
	faults            []faultResult
	standIns          standIns
	notes             []string
}

type faultResult struct {
	name    string
	at      time.Time
	gap     time.Duration // from the fault to a leader's runnables running again
	skipped string
}

// start starts a chaos worker.
func (s *suite) start() (*fleet.Proc, error) {
	return s.workers.Start(s.bin, []string{"DATABASE_URL=" + s.url, "FERRY_CONFIG=" + s.cfgFile, "CHAOS_HOOK_SECRET=" + hookSecret, "FERRY_LOG_FORMAT=json"})
}

func (s *suite) leaderProc(ctx context.Context) (*fleet.Proc, *election.Holder, error) {
	h, err := election.CurrentHolder(ctx, s.pool, election.KeyElection)
	if err != nil || h == nil || h.PID == nil {
		return nil, h, fmt.Errorf("no leader (%v)", err)
	}
	for _, p := range s.workers.Live() {
		if p.Pid() == *h.PID {
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
	s := &suite{workers: fleet.New(), killedAt: map[int]time.Time{}}
	var cl *cluster
	admin := serverURL
	if c, err := startCluster(); err != nil {
		s.notes = append(s.notes, "Postgres restart skipped: "+err.Error())
		fmt.Println("chaos: using", redact.Postgres(serverURL), "-", s.notes[0])
	} else {
		cl = c
		defer cl.stop()
		admin = cl.url("postgres")
		fmt.Println("chaos: a cluster of its own on port", cl.port)
	}

	// A fresh database, migrated, with the oracle's tables.
	url, drop, err := scratchdb.New(ctx, admin, true)
	if err != nil {
		return false, fmt.Errorf("scratch database: %s", redact.Postgres(err.Error()))
	}
	defer func() { _ = drop() }()
	s.url = url
	if s.pool, err = pgxpool.New(ctx, s.url); err != nil {
		return false, err
	}
	defer s.pool.Close()
	if _, err := s.pool.Exec(ctx, oracleSchema); err != nil {
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
	bins, err := (&fleet.Builder{Dir: dir}).Build(workerPkg)
	if err != nil {
		return false, err
	}
	s.bin = bins[workerPkg]
	for range 3 {
		if _, err := s.start(); err != nil {
			return false, err
		}
	}
	defer func() { _ = s.workers.Kill(time.Minute) }()
	if _, err := s.waitLeaderRun(ctx, time.Time{}, 30*time.Second); err != nil {
		return false, err
	}
	leaderRuns := 1 // the leader runs the suite saw start
	// The window opens once the scheduler has recorded a tick, so that
	// every tick after its start is owed.
	if err := s.waitTick(ctx, 30*time.Second); err != nil {
		return false, err
	}
	windowStart := time.Now()

	// The sampler and the load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var holders holderObs
	wg.Go(func() { holders = sampleHolders(loadCtx, s.pool, election.KeyElection) })
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
			s.killedAt[p.Pid()] = time.Now()
			_ = p.Kill()
			<-p.Done()
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
			for _, p := range s.workers.Live() {
				_ = p.Signal(syscall.SIGTERM)
				select {
				case <-p.Done():
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
		leaderRuns++
		fmt.Printf("chaos: %s: a leader runs again after %s\n", f.name, gap.Round(time.Millisecond))
		time.Sleep(steady)
	}
	stopLoad()
	wg.Wait()
	windowEnd := time.Now()

	if err := s.drain(ctx, windowEnd, 90*time.Second); err != nil {
		// Not fatal: the oracle shows what is missing.
		fmt.Println("chaos: drain:", err)
	}
	for _, p := range s.workers.Live() {
		_ = p.Signal(syscall.SIGTERM)
	}
	for _, p := range s.workers.Live() {
		select {
		case <-p.Done():
		case <-time.After(40 * time.Second):
		}
	}

	// The oracle, on what committed.
	checks := []check{
		checkHolders(holders, outages(s.faults)),
		checkRuns(observeRuns(ctx, s.pool, s.killedAt, leaderRuns)),
		checkJobs(observeJobs(ctx, s.pool, jobKeys.Load())),
		checkOutbox(observeOutbox(ctx, s.pool, messages.Load())),
		checkTicks(observeTicks(ctx, s.pool, windowStart, windowEnd)),
	}
	return report(os.Stdout, s.faults, s.standIns, checks), nil
}

var errSkip = errors.New("skipped")

// waitTick returns when the chaos-tick schedule has recorded a tick.
func (s *suite) waitTick(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var ok bool
		err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM ferry_periodic_tick WHERE schedule_id = 'chaos-tick')").Scan(&ok)
		if err == nil && ok {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no tick of chaos-tick recorded within %s", timeout)
}

// drain waits until every job is worked, every message delivered, and a
// tick after the window's end recorded (so every tick in the window is),
// doing in the meantime what the suite's time scale leaves undone.
func (s *suite) drain(ctx context.Context, windowEnd time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		var jobsLeft, msgsLeft int
		var ticked bool
		err := s.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM river_job WHERE kind = 'chaos.effect' AND state <> 'completed'),
			(SELECT count(*) FROM ferry_outbox WHERE status <> 'delivered'),
			EXISTS (SELECT 1 FROM ferry_periodic_tick WHERE schedule_id = 'chaos-tick' AND tick_at > $1)`, windowEnd).Scan(&jobsLeft, &msgsLeft, &ticked)
		if err == nil && jobsLeft == 0 && msgsLeft == 0 && ticked {
			return nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d jobs, %d messages left; a tick after the window recorded: %t", jobsLeft, msgsLeft, ticked)
		}
		// Stand-in for the rescuer, until ferry's liveness rescue lands:
		// River's rescuer puts a job back only once it has been running for
		// RescueStuckJobsAfter (an hour by default), so the jobs a killed
		// worker left running would wait past the suite's end. The UPDATE
		// does what the rescuer would do, sooner; every job it touches is
		// counted and printed.
		tag, err := s.pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now(), attempted_by = NULL
			WHERE state = 'running' AND attempted_at < now() - interval '10 seconds'`)
		if err == nil && tag.RowsAffected() > 0 {
			s.standIns.rescued += tag.RowsAffected()
			fmt.Printf("chaos: stand-in for the rescuer (until ferry's liveness rescue lands): %d running jobs of killed workers put back with an UPDATE\n", tag.RowsAffected())
		}
		// Retries waiting on their backoff are brought forward, counted too.
		tag, err = s.pool.Exec(ctx, `UPDATE river_job SET scheduled_at = now() WHERE state IN ('retryable', 'available') AND scheduled_at > now()`)
		if err == nil {
			s.standIns.broughtForward += tag.RowsAffected()
		}
		time.Sleep(500 * time.Millisecond)
	}
	return fmt.Errorf("not drained within %s: %w", timeout, last)
}

// produceJobs inserts chaos.effect jobs, each in a transaction of its own,
// at about 50 a second; a failed insert (the database restarting) is
// retried with the same key until it commits.
func (s *suite) produceJobs(ctx context.Context, n *atomic.Int64) {
	ins, err := jobs.NewInserter(s.pool)
	if err != nil {
		// No job is inserted, and the oracle's job check fails on that.
		fmt.Println("chaos: job producer:", err)
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
