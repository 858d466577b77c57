package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/election"
)

// failoverResult holds the election figures: graceful handover (SIGTERM of
// the leader to the standby's runnables starting), crash failover (kill -9
// to the same), demotion (pg_terminate_backend of the lock session to the old
// leader's "election: demoted"), and overlaps (a new leader's runnables
// starting before the old one's stopped, or two lock holders seen by the
// 50 ms sampler).
type failoverResult struct {
	Trials           int       `json:"trials"`
	TickMS           int64     `json:"tick_ms"`
	ProbeMS          int64     `json:"probe_ms"`
	GracefulMS       []float64 `json:"graceful_ms"`
	CrashMS          []float64 `json:"crash_ms"`
	DemotionMS       []float64 `json:"demotion_ms"`
	Overlaps         int       `json:"overlaps"`
	MaxHoldersSeen   int32     `json:"max_holders_seen"`
	GracefulMedianMS float64   `json:"graceful_ms_median"`
	GracefulMaxMS    float64   `json:"graceful_ms_max"`
	CrashMedianMS    float64   `json:"crash_ms_median"`
	CrashMaxMS       float64   `json:"crash_ms_max"`
	DemotionMedianMS float64   `json:"demotion_ms_median"`
	DemotionMaxMS    float64   `json:"demotion_ms_max"`
}

type logEvent struct {
	proc *workerProc
	Msg  string    `json:"msg"`
	Time time.Time `json:"time"`
}

type workerProc struct {
	cmd  *exec.Cmd
	name string
	done chan struct{}
}

type fleet struct {
	bin, url string
	events   chan logEvent
	seq      atomic.Int32
	mu       sync.Mutex
	procs    []*workerProc
	tick     time.Duration
}

func (f *fleet) start() (*workerProc, error) {
	p := &workerProc{name: fmt.Sprintf("w%d", f.seq.Add(1)), done: make(chan struct{})}
	args := []string{"run", "--admin-addr", "off", "--queues", "default=1"}
	if f.tick > 0 {
		args = append(args, "--leader-tick", f.tick.String(), "--standby-probe", f.tick.String())
	}
	p.cmd = exec.Command(f.bin, args...)
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+f.url, "FERRY_LOG_FORMAT=json", "FERRY_LOG_LEVEL=info")
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var ev logEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				ev.proc = p
				f.events <- ev
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
		_ = p.cmd.Wait()
	}()
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p, nil
}

func (f *fleet) killAll() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.procs {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// drain drops events already received.
func (f *fleet) drain() {
	for {
		select {
		case <-f.events:
		default:
			return
		}
	}
}

// await returns the first event matching msg (from proc, if not nil).
func (f *fleet) await(msg string, proc *workerProc, timeout time.Duration) (logEvent, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case ev := <-f.events:
			if ev.Msg == msg && (proc == nil || ev.proc == proc) {
				return ev, nil
			}
		case <-t.C:
			return logEvent{}, fmt.Errorf("no %q within %s", msg, timeout)
		}
	}
}

// failoverPlan says how many trials of each kind to run, and the tick and
// probe of the workers (0: the workers' defaults, 15 s and 60 s).
type failoverPlan struct {
	graceful, crash, demotion int
	tick                      time.Duration
}

func failover(ctx context.Context, serverURL string, plan failoverPlan) (failoverResult, error) {
	tick, probe := plan.tick, plan.tick
	if tick == 0 {
		tick, probe = election.DefaultTick, election.DefaultProbe
	}
	res := failoverResult{Trials: max(plan.graceful, plan.crash, plan.demotion), TickMS: tick.Milliseconds(), ProbeMS: probe.Milliseconds()}
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return res, err
	}
	defer drop()
	url := pool.Config().ConnString()

	f := &fleet{bin: bin, url: url, events: make(chan logEvent, 1024), tick: plan.tick}
	defer f.killAll()

	// The 50 ms sampler: holders of the key in this database.
	sctx, stopSampler := context.WithCancel(ctx)
	var samplerDone sync.WaitGroup
	samplerDone.Go(func() { sampleHolders(sctx, pool, &res.MaxHoldersSeen) })
	defer func() { stopSampler(); samplerDone.Wait() }()

	wait := 4*tick + 5*time.Second
	a, err := f.start()
	if err != nil {
		return res, err
	}
	if _, err := f.await("election: runnables started", a, wait); err != nil {
		return res, err
	}
	leader := a
	standby, err := f.start()
	if err != nil {
		return res, err
	}
	if _, err := f.await("election: standby", standby, wait); err != nil {
		return res, err
	}
	// replace starts a new standby for the process that left.
	replace := func() error {
		p, err := f.start()
		if err != nil {
			return err
		}
		_, err = f.await("election: standby", p, wait)
		standby = p
		return err
	}
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	// A random phase against the tick timers (at most a second: standbys
	// wait on the lock, so the probe's phase no longer matters).
	phase := func() { time.Sleep(rand.N(min(tick, time.Second))) }

	for range plan.graceful {
		phase()
		f.drain()
		t0 := time.Now()
		_ = leader.cmd.Process.Signal(syscall.SIGTERM)
		started, err := f.await("election: runnables started", standby, wait)
		if err != nil {
			return res, fmt.Errorf("graceful: %w", err)
		}
		res.GracefulMS = append(res.GracefulMS, ms(started.Time.Sub(t0)))
		<-leader.done
		leader = standby
		if err := replace(); err != nil {
			return res, err
		}
	}
	for range plan.crash {
		phase()
		f.drain()
		t0 := time.Now()
		_ = syscall.Kill(-leader.cmd.Process.Pid, syscall.SIGKILL)
		started, err := f.await("election: runnables started", standby, wait)
		if err != nil {
			return res, fmt.Errorf("crash: %w", err)
		}
		if started.Time.Before(t0) {
			res.Overlaps++
		}
		res.CrashMS = append(res.CrashMS, ms(started.Time.Sub(t0)))
		<-leader.done
		leader = standby
		if err := replace(); err != nil {
			return res, err
		}
	}
	for range plan.demotion { // after pg_terminate_backend
		h, err := election.CurrentHolder(ctx, pool, election.KeyElection)
		if err != nil || h == nil {
			return res, fmt.Errorf("demotion: no holder: %v", err)
		}
		phase()
		f.drain()
		t0 := time.Now()
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", h.BackendPID); err != nil {
			return res, err
		}
		// Collect events until someone's runnables start again.
		var demotedAt, startedAt time.Time
		var next *workerProc
		deadline := time.After(wait + 2*tick)
		for startedAt.IsZero() {
			select {
			case ev := <-f.events:
				switch {
				case ev.Msg == "election: demoted" && ev.proc == leader:
					demotedAt = ev.Time
				case ev.Msg == "election: runnables started":
					startedAt, next = ev.Time, ev.proc
				}
			case <-deadline:
				return res, fmt.Errorf("demotion: no new leader within %s", wait+2*tick)
			}
		}
		if demotedAt.IsZero() || startedAt.Before(demotedAt) {
			res.Overlaps++
		}
		res.DemotionMS = append(res.DemotionMS, ms(demotedAt.Sub(t0)))
		if next != leader {
			leader, standby = next, leader
		}
		// Let the other process settle as a standby again.
		time.Sleep(tick)
	}
	stopSampler()
	samplerDone.Wait()
	if res.MaxHoldersSeen > 1 {
		res.Overlaps++
	}
	res.GracefulMedianMS, res.GracefulMaxMS = medianMax(res.GracefulMS)
	res.CrashMedianMS, res.CrashMaxMS = medianMax(res.CrashMS)
	res.DemotionMedianMS, res.DemotionMaxMS = medianMax(res.DemotionMS)
	return res, nil
}

func sampleHolders(ctx context.Context, pool *pgxpool.Pool, max *int32) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		var n int32
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1::bigint::oid
			AND classid = 0 AND objsubid = 1 AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, election.KeyElection).Scan(&n)
		if err == nil && n > *max {
			*max = n
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func medianMax(xs []float64) (float64, float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}

// buildIntoTemp builds the main package pkg into a new temporary directory
// and returns the directory (the caller removes it) and the binary's path.
func buildIntoTemp(pkg string) (dir, bin string, err error) {
	dir, err = os.MkdirTemp("", "ferry-bench-")
	if err != nil {
		return "", "", err
	}
	bin = filepath.Join(dir, filepath.Base(pkg))
	if out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", "", fmt.Errorf("build %s: %v: %s", pkg, err, out)
	}
	return dir, bin, nil
}
