package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/seal"
)

// How the bench counts a backlog worked, without loading what it measures.
//
// In this process (bare River, an embedded ferry server), as River's own
// benchmark counts (cmd/river's bench, in River's repository): the client's
// event subscription, which a job reaches once River's completer has
// stored its state; the clock runs from the moment the client has started
// to the last completion. For a `worker run` process, as a user runs it:
// the clock runs from the process's launch to the first probe that finds
// no job left, on a connection of the bench's own, every probeEvery: first
// the backlog's last job by its primary key (River fetches it last: its
// batch was written last) until it is completed, then River's fetch index
// until no job is available, pending, retryable, scheduled or running.
// Then one scrape of the worker's /metrics must count every job completed
// there.
//
// Before, every figure polled `count(*) FROM river_job WHERE state <>
// 'completed'` every 20 ms: a scan of the whole backlog fifty times a
// second, on both sides of every paired round (docs/bench/throughput.md
// says what it cost and which figures moved).

// probeEvery is the cadence of a worker process's end probe.
const probeEvery = 100 * time.Millisecond

// The end probe's two reads. sqlLastDone reads one job by its primary
// key. sqlLeft reads River's fetch index (state first), on a session
// without sequential or bitmap scans: the planner, its statistics taken
// while the backlog waited, would read the whole table for a job left
// (18 to 27 ms at 200,000 jobs, against 2.6 ms on the index).
const (
	sqlLastDone = `SELECT state = 'completed' FROM river_job WHERE id = $1`
	sqlLeft     = `SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'pending', 'retryable', 'scheduled', 'running'))`
)

// completions counts the jobs a River client of this process finishes, from
// its event subscription.
type completions struct {
	events <-chan *river.Event
	cancel func()
}

// countCompletions subscribes to rc's finished jobs; the channel holds
// every one of n, so River never drops an event (it drops what a full
// channel cannot take).
func countCompletions(rc *river.Client[pgx.Tx], n int) *completions {
	ch, cancel := rc.SubscribeConfig(&river.SubscribeConfig{ChanSize: n, Kinds: []river.EventKind{
		river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled,
	}})
	return &completions{events: ch, cancel: cancel}
}

// wait returns when n jobs have completed, with the time the last did. A
// job failed or cancelled is an error: a no-op job does neither.
func (c *completions) wait(ctx context.Context, n int) (time.Time, error) {
	defer c.cancel()
	timeout := time.NewTimer(10 * time.Minute)
	defer timeout.Stop()
	var last time.Time
	for done := 0; done < n; {
		select {
		case ev, ok := <-c.events:
			if !ok {
				return last, fmt.Errorf("event subscription closed after %d of %d jobs", done, n)
			}
			if ev.Kind != river.EventKindJobCompleted {
				return last, fmt.Errorf("job %d %s: %v", ev.Job.ID, ev.Kind, ev.Job.Errors)
			}
			done++
			last = time.Now()
		case <-timeout.C:
			return last, fmt.Errorf("%d of %d jobs completed in 10 minutes", done, n)
		case <-ctx.Done():
			return last, ctx.Err()
		}
	}
	return last, nil
}

// workerThroughput works the same backlog of no-op jobs with a bare River
// client and with ferry's whole worker stack in this process (middleware,
// metrics, logging, election, relay, scheduler), with the same fetch
// settings and workers (ferry's defaults), in paired rounds (worker_ratio:
// the median of the rounds' ratios ferry/River), both counted by their
// clients' events.
func workerThroughput(ctx context.Context, serverURL string, n, rounds int) (paired, error) {
	return pairedRounds(rounds,
		func() (float64, error) {
			return bareRiverThroughput(ctx, serverURL, n, defaultWorkers(), ferry.DefaultFetchCooldown, ferry.DefaultFetchPollInterval, false)
		},
		func() (float64, error) { return ferryThroughput(ctx, serverURL, n, nil, false) })
}

// defaultWorkers is the worker count of ferry's default queue.
func defaultWorkers() int {
	q, err := ferry.ParseQueues(ferry.DefaultQueues)
	if err != nil {
		panic(err)
	}
	return q[river.QueueDefault]
}

// River's own benchmark settings (cmd/river's bench): the strongest bare
// River this machine has measured.
const (
	riverBestWorkers  = 2000
	riverBestCooldown = 2 * time.Millisecond
	riverBestPoll     = 20 * time.Millisecond
)

// riverBest is the result of riverBestRatio: the worker process against
// River at its best (Paired), and, when measured, ferry's server embedded
// in this process against the same River (InProcess).
type riverBest struct {
	Paired    paired
	InProcess *paired
	// HarnessCPUShare is the share of the machine's CPU the end probe of
	// the worker process takes (this process and its Postgres backend),
	// measured on the first round's backlog as it waits, before the
	// worker starts.
	HarnessCPUShare float64
}

// riverBestRatio works a backlog of n no-op jobs with bare River at its
// best (River's own bench settings, on River's own schema, counted as
// River's bench counts) and with a `worker run` process at its defaults
// (admin server, metrics, liveness, leader and every default middleware
// on), in rounds taking turns (worker_ratio_vs_river_best: the median of
// the rounds' ratios worker/River). With inProcess, each round also
// measures ferry's server embedded in this process, at the same defaults,
// against the same River figure: River, the worker process, the embedded
// server in even rounds, the other way round in odd ones.
func riverBestRatio(ctx context.Context, serverURL string, n, rounds int, inProcess bool) (riverBest, error) {
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return riverBest{}, err
	}
	defer os.RemoveAll(dir)
	var (
		res      riverBest
		embedded paired
	)
	for r := range rounds {
		var rv, proc, emb float64
		steps := []func() error{
			func() (err error) {
				rv, err = bareRiverThroughput(ctx, serverURL, n, riverBestWorkers, riverBestCooldown, riverBestPoll, true)
				return err
			},
			func() (err error) {
				var load *float64
				if r == 0 {
					load = &res.HarnessCPUShare
				}
				proc, err = workerProcThroughput(ctx, serverURL, bin, n, load)
				return err
			},
		}
		if inProcess {
			steps = append(steps, func() (err error) {
				emb, err = ferryThroughput(ctx, serverURL, n, nil, false)
				return err
			})
		}
		if r%2 == 1 {
			slices.Reverse(steps)
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return res, err
			}
		}
		res.Paired.Base, res.Paired.Other = max(res.Paired.Base, rv), max(res.Paired.Other, proc)
		res.Paired.Ratios = append(res.Paired.Ratios, proc/rv)
		if inProcess {
			embedded.Base, embedded.Other = max(embedded.Base, rv), max(embedded.Other, emb)
			embedded.Ratios = append(embedded.Ratios, emb/rv)
		}
	}
	if inProcess {
		res.InProcess = &embedded
	}
	return res, nil
}

// bareRiverThroughput works a backlog of n no-op jobs with a bare River
// client (workers in the default queue, the fetch settings given) and
// returns its rate, counted as River's own bench counts: the client's
// completion events, from the moment it has started. On riverSchema its
// database holds River's tables alone (as River's bench runs), not
// ferry's triggers on them.
func bareRiverThroughput(ctx context.Context, serverURL string, n, workerCount int, cooldown, poll time.Duration, riverSchema bool) (float64, error) {
	pool, drop, err := scratchRiver(ctx, serverURL, riverSchema)
	if err != nil {
		return 0, err
	}
	defer drop()
	if err := backlogSettled(ctx, pool, n, nil); err != nil {
		return 0, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &jobs.NoopWorker{})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown: cooldown, FetchPollInterval: poll,
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workerCount}},
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return 0, err
	}
	done := countCompletions(rc, n)
	before, err := readCPU(0)
	if err != nil {
		return 0, err
	}
	if err := rc.Start(ctx); err != nil {
		done.cancel()
		return 0, err
	}
	start := time.Now()
	defer func() { _ = rc.Stop(ctx) }()
	last, err := done.wait(ctx, n)
	if err != nil {
		return 0, err
	}
	rate := float64(n) / last.Sub(start).Seconds()
	return rate, reportCPU(fmt.Sprintf("bare River (%d workers)", workerCount), "the bench's", rate, n, before, 0)
}

// backlogSettled writes a backlog of n no-op jobs (noopBacklog) and
// then a checkpoint, so that the writes of the backlog, and of the round
// before, are on disk before the clock starts: a checkpoint that
// max_wal_size forces in one side of a paired round and not the other
// would count against that side alone.
func backlogSettled(ctx context.Context, pool *pgxpool.Pool, n int, mw rivertype.Middleware) error {
	if err := noopBacklog(ctx, pool, n, mw); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint (the bench's role needs pg_checkpoint, as scripts/pg-up grants): %w", err)
	}
	return nil
}

// scratchRiver is scratch, or, on riverSchema, a database with River's
// migrations alone.
func scratchRiver(ctx context.Context, serverURL string, riverSchema bool) (*pgxpool.Pool, func(), error) {
	if !riverSchema {
		return scratch(ctx, serverURL)
	}
	pool, closeAll, err := scratchOf(ctx, serverURL, false)
	if err != nil {
		return nil, nil, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err == nil {
		_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("river migrations: %w", err)
	}
	return pool, closeAll, nil
}

// ferryThroughput works a backlog of n no-op jobs with ferry's whole worker
// stack embedded in this process and returns its rate, counted by its River
// client's completion events from the moment the server has started. With
// keys, the backlog is sealed with them and the worker verifies every job.
// Pooled, the worker's job traffic goes through PgBouncer in transaction
// mode (FERRY_POOLER=transaction). tune, if any, changes the worker's
// configuration last.
func ferryThroughput(ctx context.Context, serverURL string, n int, keys *seal.Keys, pooled bool, tune ...func(*ferry.Config)) (float64, error) {
	return ferryThroughputOf(ctx, serverURL, n, throughputRound{keys: keys, pooled: pooled, tune: tune})
}

// throughputRound is how ferryThroughputOf sets up its round.
type throughputRound struct {
	// before, if not nil, runs on the scratch database before the backlog
	// is written (as a running worker's registrations are there before
	// the jobs it works).
	before func(context.Context, *pgxpool.Pool) error
	// backlog, if not nil, writes the n jobs (and settles them) in place
	// of n plain no-op jobs.
	backlog func(ctx context.Context, pool *pgxpool.Pool, n int) error
	keys    *seal.Keys
	pooled  bool
	tune    []func(*ferry.Config)
}

// ferryThroughputOf is ferryThroughput set up by r.
func ferryThroughputOf(ctx context.Context, serverURL string, n int, r throughputRound) (float64, error) {
	keys := r.keys
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, err
	}
	defer drop()
	cfg, stopBouncer, err := workerConfig(pool, r.pooled)
	if err != nil {
		return 0, err
	}
	defer stopBouncer()
	if r.before != nil {
		if err := r.before(ctx, pool); err != nil {
			return 0, err
		}
	}
	if keys != nil {
		// As in a deployment with seals, whose first worker with keys put
		// the claim trigger on: the backlog is claimed as it is written.
		if _, err := seal.Arm(ctx, pool); err != nil {
			return 0, err
		}
	}
	if r.backlog != nil {
		err = r.backlog(ctx, pool, n)
	} else {
		err = backlogSettled(ctx, pool, n, seal.Middleware(keys))
	}
	if err != nil {
		return 0, err
	}
	// ferry's default queues and workers (cfg.Queues.Workers nil).
	cfg.Seal.Keys = keys
	cfg.Logger = workerLog()
	for _, f := range r.tune {
		f(&cfg)
	}
	return serverThroughput(ctx, cfg, n)
}

// serverThroughput runs a ferry server of cfg in this process over a
// backlog of n jobs already written and returns its rate, counted by its
// River client's completion events from the moment the server has started.
func serverThroughput(ctx context.Context, cfg ferry.Config, n int) (float64, error) {
	srv, err := ferry.New(ctx, cfg)
	if err != nil {
		return 0, err
	}
	done := countCompletions(srv.River(), n)
	before, err := readCPU(0)
	if err != nil {
		return 0, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	exited := make(chan error, 1)
	go func() { exited <- srv.Run(runCtx) }()
	var start time.Time
	select {
	case <-srv.Started():
		start = time.Now()
	case err := <-exited:
		done.cancel()
		return 0, fmt.Errorf("server: %w", err)
	}
	last, err := done.wait(ctx, n)
	stop()
	if rerr := <-exited; err == nil && rerr != nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	if err != nil {
		return 0, err
	}
	rate := float64(n) / last.Sub(start).Seconds()
	return rate, reportCPU("ferry's server embedded", "the bench's", rate, n, before, 0)
}

// workerProcThroughput works a backlog of n no-op jobs with a `worker run`
// process (bin) at its defaults, the admin server on a free loopback port,
// and returns its rate from the process's launch to the first end probe
// that finds no job left. The worker's /metrics must then count n jobs
// completed in it. With load, it also measures the probe's own load on the
// backlog as it waits, before the worker starts (endProbe.load), into load.
func workerProcThroughput(ctx context.Context, serverURL, bin string, n int, load *float64) (float64, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, err
	}
	defer drop()
	if err := backlogSettled(ctx, pool, n, nil); err != nil {
		return 0, err
	}
	addr, err := freeAddr()
	if err != nil {
		return 0, err
	}
	probe, err := dialProbe(ctx, pool)
	if err != nil {
		return 0, err
	}
	defer probe.close(ctx)
	if load != nil {
		// The probe's own load, on the backlog as it waits.
		if *load, err = probe.load(ctx, 5*time.Second); err != nil {
			return 0, err
		}
	}
	before, err := readCPU(0)
	if err != nil {
		return 0, err
	}
	before.proc = 0 // the worker's, from its launch
	start := time.Now()
	p, err := fleet.Start(bin, []string{"DATABASE_URL=" + pool.Config().ConnString(), "FERRY_ADMIN_ADDR=" + addr}, nil, "run")
	if err != nil {
		return 0, err
	}
	defer stopProc(p)
	end, err := probe.waitNoneLeft(ctx, p)
	if err != nil {
		return 0, err
	}
	rate := float64(n) / end.Sub(start).Seconds()
	if err := reportCPU("worker process", "the worker's", rate, n, before, p.Pid()); err != nil {
		return 0, err
	}
	got, err := completedOnMetrics(ctx, "http://"+addr+"/metrics", jobs.NoopArgs{}.Kind())
	if err != nil {
		return 0, err
	}
	if got != n {
		return 0, fmt.Errorf("the worker's /metrics counts %d %s jobs completed, want %d", got, jobs.NoopArgs{}.Kind(), n)
	}
	return rate, nil
}

// stopProc stops a worker process as a deployment does (SIGTERM), or kills
// it after a minute. Stopping one twice is harmless.
func stopProc(p *fleet.Proc) {
	_ = p.Signal(syscall.SIGTERM)
	if _, err := p.Wait(time.Minute); err != nil {
		_ = p.Kill()
		_, _ = p.Wait(10 * time.Second)
	}
}

// endProbe is the bench's connection that tells when a backlog is worked.
type endProbe struct {
	conn *pgx.Conn
	last int64 // the backlog's last job
}

// dialProbe opens the end probe's connection to pool's database, whose
// backlog is written.
func dialProbe(ctx context.Context, pool *pgxpool.Pool) (*endProbe, error) {
	conn, err := pgx.Connect(ctx, pool.Config().ConnString())
	if err != nil {
		return nil, err
	}
	pr := &endProbe{conn: conn}
	_, err = conn.Exec(ctx, `SET enable_seqscan = off; SET enable_bitmapscan = off`)
	if err == nil {
		err = conn.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&pr.last)
	}
	if err != nil {
		pr.close(ctx)
		return nil, err
	}
	return pr, nil
}

func (pr *endProbe) close(ctx context.Context) { _ = pr.conn.Close(context.WithoutCancel(ctx)) }

// left says whether a job is left to work: while the last job is not
// completed, without reading the index.
func (pr *endProbe) left(ctx context.Context) (bool, error) {
	var done bool
	if err := pr.conn.QueryRow(ctx, sqlLastDone, pr.last).Scan(&done); err != nil {
		return false, fmt.Errorf("end probe: job %d: %w", pr.last, err)
	}
	if !done {
		return true, nil
	}
	var left bool
	err := pr.conn.QueryRow(ctx, sqlLeft).Scan(&left)
	return left, err
}

// waitNoneLeft probes every probeEvery until no job is left to work, and
// returns when it found none; p exiting first is an error.
func (pr *endProbe) waitNoneLeft(ctx context.Context, p *fleet.Proc) (time.Time, error) {
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		left, err := pr.left(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if !left {
			return time.Now(), nil
		}
		select {
		case <-p.Done():
			return time.Time{}, fmt.Errorf("worker exited before its backlog was worked: %s", tail(p))
		case <-time.After(probeEvery):
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
	return time.Time{}, fmt.Errorf("backlog not worked in 10 minutes")
}

// load runs the end probe at its cadence for d on its database, whose
// backlog waits with nothing working it, and returns the share of the
// machine's CPU it took: this process's CPU time and the probe's Postgres
// backend's, over d times the machine's CPUs.
func (pr *endProbe) load(ctx context.Context, d time.Duration) (float64, error) {
	backend := int(pr.conn.PgConn().PID())
	selfBefore, err := selfCPU()
	if err != nil {
		return 0, err
	}
	beBefore, err := procCPU(backend)
	if err != nil {
		return 0, fmt.Errorf("the probe's Postgres backend (not on this machine?): %w", err)
	}
	start := time.Now()
	for time.Since(start) < d {
		left, err := pr.left(ctx)
		if err != nil {
			return 0, err
		}
		if !left {
			return 0, fmt.Errorf("end probe: no job left in a backlog nothing works")
		}
		time.Sleep(probeEvery)
	}
	wall := time.Since(start)
	selfAfter, err := selfCPU()
	if err != nil {
		return 0, err
	}
	beAfter, err := procCPU(backend)
	if err != nil {
		return 0, err
	}
	used := (selfAfter - selfBefore) + (beAfter - beBefore)
	return used.Seconds() / (wall.Seconds() * float64(runtime.NumCPU())), nil
}

// cpuUse is CPU time used so far: by the machine's processes, and by one
// of them.
type cpuUse struct{ machine, proc time.Duration }

// readCPU reads the machine's CPU time and process pid's (0: this one).
func readCPU(pid int) (cpuUse, error) {
	var (
		u   cpuUse
		err error
	)
	if u.machine, err = machineCPU(); err != nil {
		return u, err
	}
	if pid == 0 {
		u.proc, err = selfCPU()
	} else {
		u.proc, err = procCPU(pid)
	}
	return u, err
}

// reportCPU prints a backlog's rate and the CPU its work took per 10,000
// of its n jobs since before: process pid's (0: this one), named whose,
// and the machine's.
func reportCPU(what, whose string, rate float64, n int, before cpuUse, pid int) error {
	now, err := readCPU(pid)
	if err != nil {
		return err
	}
	per := func(d time.Duration) float64 { return float64(d.Milliseconds()) * 10_000 / float64(n) }
	fmt.Fprintf(os.Stderr, "bench: %s: %.0f jobs/s; CPU per 10,000 jobs: %s %.0f ms, the machine's %.0f ms\n",
		what, rate, whose, per(now.proc-before.proc), per(now.machine-before.machine))
	return nil
}

// machineCPU is the CPU time every process of the machine has used
// (/proc/stat: user, nice, system, irq and softirq of all CPUs).
func machineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: %q", line)
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7} {
		t, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %w", err)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// selfCPU is this process's user and system CPU time.
func selfCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

// procCPU is process pid's user and system CPU time, from /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's name, which closes with the line's
	// last ')': state is field 3, utime 14, stime 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, s := range f[11:13] {
		t, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// completedOnMetrics reads, from a worker's /metrics, how many jobs of kind
// it completed (ferry_job_duration_seconds_count, outcome completed).
func completedOnMetrics(ctx context.Context, url, kind string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	req.Close = true // one scrape: no idle connection left behind
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("/metrics: %w", err)
	}
	const name = "ferry_job_duration_seconds"
	for _, m := range families[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["kind"] == kind && labels["outcome"] == "completed" {
			return int(m.GetHistogram().GetSampleCount()), nil
		}
	}
	return 0, fmt.Errorf("/metrics has no %s_count{kind=%q,outcome=\"completed\"}", name, kind)
}

// tail is the end of p's stderr, for an error.
func tail(p *fleet.Proc) string {
	_, stderr := p.Tail(10)
	return stderr
}
