package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
)

// failoverTick is the leader tick of the full run's failover step.
const failoverTick = time.Second

// demotionBound is what the failover step's partitioned leader may take
// to demote itself: a tick and the elector's default tick timeout (a
// third of it), 1,333.3 ms at failoverTick. A leader partitioned just
// after a passing check finds out a tick later, when that check times
// out.
var demotionBound = failoverTick + election.DefaultTickTimeout(failoverTick)

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// lease is how long the server keeps a partitioned holder's silent
// session at a leader tick of tick (the elector's idle_session_timeout):
// three ticks and the default tick timeout.
func lease(tick time.Duration) time.Duration { return 3*tick + election.DefaultTickTimeout(tick) }

// failoverResult holds the election figures: graceful handover (SIGTERM of
// the leader to the standby's runnables starting), crash failover (kill -9
// to the same), demotion (pg_terminate_backend of the lock session to the old
// leader's "election: demoted"), partition (the leader's network to
// Postgres blackholed both ways, nothing closed, by a TCP proxy in front of
// each worker: to its "election: demoted", and to the standby's runnables
// starting once the server's lease freed the lock), and overlaps (a new
// leader's runnables starting before the old one's stopped, or two lock
// holders seen by the 50 ms sampler).
type failoverResult struct {
	Trials     int       `json:"trials"`
	TickMS     int64     `json:"tick_ms"`
	ProbeMS    int64     `json:"probe_ms"`
	GracefulMS []float64 `json:"graceful_ms"`
	CrashMS    []float64 `json:"crash_ms"`
	DemotionMS []float64 `json:"demotion_ms"`
	// PartitionDemotionMS is from the cut to the old leader's demotion,
	// PartitionMS to the new leader's runnables starting.
	PartitionDemotionMS       []float64 `json:"partition_demotion_ms"`
	PartitionMS               []float64 `json:"partition_ms"`
	Overlaps                  int       `json:"overlaps"`
	MaxHoldersSeen            int32     `json:"max_holders_seen"`
	GracefulMedianMS          float64   `json:"graceful_ms_median"`
	GracefulMaxMS             float64   `json:"graceful_ms_max"`
	CrashMedianMS             float64   `json:"crash_ms_median"`
	CrashMaxMS                float64   `json:"crash_ms_max"`
	DemotionMedianMS          float64   `json:"demotion_ms_median"`
	DemotionMaxMS             float64   `json:"demotion_ms_max"`
	PartitionDemotionMedianMS float64   `json:"partition_demotion_ms_median"`
	PartitionDemotionMaxMS    float64   `json:"partition_demotion_ms_max"`
	PartitionMedianMS         float64   `json:"partition_ms_median"`
	PartitionMaxMS            float64   `json:"partition_ms_max"`
}

// workers are the `worker run` processes of a failover or orphans
// measurement: JSON logs at info, no admin server, and the tick as leader
// tick and standby probe (0: the defaults).
type workers struct {
	*fleet.Fleet
	bin, url string
	tick     time.Duration
	// proxied: each worker reaches Postgres through a TCP proxy of its own
	// (in proxies, by pid), which a partition trial blackholes.
	proxied bool
	proxies map[int]*netproxy.Proxy
}

// start starts a worker of queues (name=workers,…).
func (w *workers) start(queues string) (*fleet.Proc, error) {
	args := []string{"run", "--admin-addr", "off", "--queues", queues}
	if w.tick > 0 {
		args = append(args, "--leader-tick", w.tick.String(), "--standby-probe", w.tick.String())
	}
	u := w.url
	var px *netproxy.Proxy
	if w.proxied {
		pu, err := url.Parse(w.url)
		if err != nil {
			return nil, err
		}
		if px, err = netproxy.Start(pu.Host); err != nil {
			return nil, err
		}
		pu.Host = px.Addr()
		u = pu.String()
	}
	p, err := w.Start(w.bin, []string{"DATABASE_URL=" + u, "FERRY_LOG_FORMAT=json", "FERRY_LOG_LEVEL=info"}, args...)
	if err != nil {
		if px != nil {
			_ = px.Close()
		}
		return nil, err
	}
	if px != nil {
		if w.proxies == nil {
			w.proxies = map[int]*netproxy.Proxy{}
		}
		w.proxies[p.Pid()] = px
	}
	return p, nil
}

// closeProxies closes every worker's proxy.
func (w *workers) closeProxies() {
	for _, px := range w.proxies {
		_ = px.Close()
	}
}

// await returns the first record with msg (from proc, if not nil) written
// after since.
func (w *workers) await(since fleet.Mark, msg string, proc *fleet.Proc, timeout time.Duration) (fleet.Record, error) {
	rec, err := w.WaitForRecord(since, timeout, func(r fleet.Record) bool {
		return r.Msg == msg && (proc == nil || r.Proc == proc)
	})
	if err != nil {
		return rec, fmt.Errorf("no %q within %s", msg, timeout)
	}
	return rec, nil
}

// failoverPlan says how many trials of each kind to run, and the tick and
// probe of the workers (0: the workers' defaults, 1.5 s and 60 s).
type failoverPlan struct {
	graceful, crash, demotion, partition int
	tick                                 time.Duration
}

func failover(ctx context.Context, serverURL string, plan failoverPlan) (failoverResult, error) {
	tick, probe := plan.tick, plan.tick
	if tick == 0 {
		tick, probe = election.DefaultTick, election.DefaultProbe
	}
	res := failoverResult{Trials: max(plan.graceful, plan.crash, plan.demotion, plan.partition), TickMS: tick.Milliseconds(), ProbeMS: probe.Milliseconds()}
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

	f := &workers{Fleet: fleet.New(), bin: bin, url: url, tick: plan.tick, proxied: plan.partition > 0}
	defer func() { _ = f.Kill(time.Minute); f.closeProxies() }()

	// The 50 ms sampler: holders of the key in this database.
	sctx, stopSampler := context.WithCancel(ctx)
	var samplerDone sync.WaitGroup
	samplerDone.Go(func() { sampleHolders(sctx, pool, &res.MaxHoldersSeen) })
	defer func() { stopSampler(); samplerDone.Wait() }()

	wait := 4*tick + 5*time.Second
	a, err := f.start("default=1")
	if err != nil {
		return res, err
	}
	if _, err := f.await(nil, "election: runnables started", a, wait); err != nil {
		return res, err
	}
	leader := a
	standby, err := f.start("default=1")
	if err != nil {
		return res, err
	}
	if _, err := f.await(nil, "election: standby", standby, wait); err != nil {
		return res, err
	}
	// replace starts a new standby for the process that left.
	replace := func() error {
		p, err := f.start("default=1")
		if err != nil {
			return err
		}
		_, err = f.await(nil, "election: standby", p, wait)
		standby = p
		return err
	}
	// A random phase against the tick timers (at most a second: standbys
	// try the lock every 250 ms at most, so the probe's phase does not
	// matter).
	phase := func() { time.Sleep(rand.N(min(tick, time.Second))) }

	for range plan.graceful {
		phase()
		m := f.Mark()
		t0 := time.Now()
		_ = leader.Signal(syscall.SIGTERM)
		started, err := f.await(m, "election: runnables started", standby, wait)
		if err != nil {
			return res, fmt.Errorf("graceful: %w", err)
		}
		res.GracefulMS = append(res.GracefulMS, ms(started.Time.Sub(t0)))
		<-leader.Done()
		leader = standby
		if err := replace(); err != nil {
			return res, err
		}
	}
	for range plan.crash {
		phase()
		m := f.Mark()
		t0 := time.Now()
		_ = leader.Kill()
		started, err := f.await(m, "election: runnables started", standby, wait)
		if err != nil {
			return res, fmt.Errorf("crash: %w", err)
		}
		if started.Time.Before(t0) {
			res.Overlaps++
		}
		res.CrashMS = append(res.CrashMS, ms(started.Time.Sub(t0)))
		<-leader.Done()
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
		m := f.Mark()
		t0 := time.Now()
		if _, err := pool.Exec(ctx, "SELECT pg_terminate_backend($1)", h.BackendPID); err != nil {
			return res, err
		}
		// Wait until someone's runnables start again, then look for the old
		// leader's demotion among what was written by then.
		started, err := f.await(m, "election: runnables started", nil, wait+2*tick)
		if err != nil {
			return res, fmt.Errorf("demotion: no new leader within %s", wait+2*tick)
		}
		startedAt, next := started.Time, started.Proc
		var demotedAt time.Time
		if demoted, err := f.await(m, "election: demoted", leader, 0); err == nil {
			demotedAt = demoted.Time
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
	// Partitions: the leader cut off, nothing closed. Its ownership check
	// times out and demotes it; the server ends its silent lock session
	// after the lease (three ticks and the timeout) and the standby, which
	// tries the lock every 250 ms at most, takes it and defers a tick and
	// its timeout, since
	// its predecessor did not resign.
	for range plan.partition {
		phase()
		px := f.proxies[leader.Pid()]
		if px == nil {
			return res, fmt.Errorf("partition: the leader (pid %d) has no proxy", leader.Pid())
		}
		m := f.Mark()
		t0 := time.Now()
		px.Partition()
		started, err := f.await(m, "election: runnables started", standby, lease(tick)+wait)
		if err != nil {
			px.Heal()
			return res, fmt.Errorf("partition: %w", err)
		}
		demoted, err := f.await(m, "election: demoted", leader, 0)
		if err != nil || started.Time.Before(demoted.Time) {
			res.Overlaps++
		}
		if err == nil {
			res.PartitionDemotionMS = append(res.PartitionDemotionMS, ms(demoted.Time.Sub(t0)))
		}
		res.PartitionMS = append(res.PartitionMS, ms(started.Time.Sub(t0)))
		// The old leader's liveness session went with the lease too: it
		// would stop itself once it heard it was declared dead. It goes
		// now, and a new standby takes its place.
		px.Heal()
		_ = leader.Kill()
		<-leader.Done()
		leader = standby
		if err := replace(); err != nil {
			return res, err
		}
	}
	stopSampler()
	samplerDone.Wait()
	if res.MaxHoldersSeen > 1 {
		res.Overlaps++
	}
	res.GracefulMedianMS, res.GracefulMaxMS = medianMax(res.GracefulMS)
	res.CrashMedianMS, res.CrashMaxMS = medianMax(res.CrashMS)
	res.DemotionMedianMS, res.DemotionMaxMS = medianMax(res.DemotionMS)
	res.PartitionDemotionMedianMS, res.PartitionDemotionMaxMS = medianMax(res.PartitionDemotionMS)
	res.PartitionMedianMS, res.PartitionMaxMS = medianMax(res.PartitionMS)
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
	bins, err := (&fleet.Builder{Dir: dir}).Build(pkg)
	if err != nil {
		os.RemoveAll(dir)
		return "", "", err
	}
	return dir, bins[pkg], nil
}
