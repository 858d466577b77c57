package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/scratchdb"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
	"github.com/ferryq/ferry/internal/testkit/pgbouncer"
	"github.com/ferryq/ferry/internal/testkit/pgcluster"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
)

const (
	hookSecret = "chaos-hook-secret"
	// workerPkg is the suite's worker, built for each run.
	workerPkg = "./tools/chaos/chaosworker"

	// leaderTick is the chaos worker's leader tick (chaosworker sets it),
	// which is also its liveness heartbeat.
	leaderTick = time.Second
	// lease is how long a worker's liveness session may stay silent before
	// Postgres ends it: three ticks plus the tick timeout (a third of the
	// tick by default).
	lease = 3*leaderTick + tickTimeout
	// tickTimeout is the bound of each ownership check (a third of the tick
	// by default): a leader cut off demotes itself within a tick and this.
	tickTimeout = leaderTick / 3
	// stallFor is how long the SIGSTOP fault stops a worker: under the
	// lease by more than a tick and a margin, since the session may have
	// been silent for up to a tick when the stop begins.
	stallFor = 1500 * time.Millisecond

	// Every longEvery-th job is long: it sleeps longSleep before its
	// effect, so that faults find jobs running.
	longEvery = 10
	longSleep = 3 * time.Second
)

type suite struct {
	bin, url, cfgFile string
	pool              *pgxpool.Pool
	// jobURL and jobPool carry the job traffic: the workers' and the
	// producers'. They are url and pool, or, with -pgbouncer, a PgBouncer
	// in transaction mode in front of them; the oracle, the sampler and the
	// faults always use pool, which reaches Postgres itself.
	jobURL  string
	jobPool *pgxpool.Pool
	workers *fleet.Fleet
	faults  []faultResult
	notes   []string
	stalled stallObs     // what the SIGSTOP fault did
	paused  lostObs      // what the SIGSTOP past the lease did
	cut     lostObs      // what the worker partition fault did
	kills   killsObs     // what the liveness session fault did
	lost    lostReplyObs // what the lost registration reply did
	// failoverRecovery is from the primary's crash until every working
	// worker had started a job on the promoted standby.
	failoverRecovery time.Duration
	// cutLeader is the leader the leader partition fault cut off.
	cutLeader demotionObs

	watching sync.WaitGroup // one per worker started, until its exit is recorded
	mu       sync.Mutex
	// exposures is what the harness did to each process, by pid.
	exposures map[int][]exposure
	// ending is the processes the harness is stopping or killing, by pid.
	ending  map[int]exposureKind
	exits   []workerExit
	closing bool // the run is over: a worker that exits is not replaced
	// proxies stand between each worker and Postgres (and PgBouncer), by
	// pid: the partition faults blackhole them.
	proxies map[int][]*netproxy.Proxy
}

type faultResult struct {
	name    string
	at      time.Time
	gap     time.Duration // from the fault to a leader's runnables running again
	note    string        // instead of the gap, for a fault that fails nothing over
	skipped string
	// dead is the workers declared dead while running from this fault until
	// the next, and rescued the jobs taken back from them.
	dead, rescued int
}

func newSuite() *suite {
	return &suite{workers: fleet.New(), exposures: map[int][]exposure{}, ending: map[int]exposureKind{}, proxies: map[int][]*netproxy.Proxy{}}
}

// start starts a chaos worker.
func (s *suite) start() (*fleet.Proc, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, _, err := s.startLocked(false)
	return p, err
}

// startLocked starts a chaos worker; with lostReply, the reply to its
// registration's COMMIT is lost on its way (workerEnv), and armed is the
// proxies that will lose it.
func (s *suite) startLocked(lostReply bool) (p *fleet.Proc, armed []*netproxy.Proxy, err error) {
	env, proxies, armed, err := s.workerEnv(lostReply)
	if err != nil {
		return nil, nil, err
	}
	p, err = s.workers.Start(s.bin, env)
	if err != nil {
		for _, x := range proxies {
			_ = x.Close()
		}
		return nil, nil, err
	}
	s.proxies[p.Pid()] = proxies
	s.watching.Add(1)
	go s.watch(p)
	return p, armed, nil
}

// watch records p's exit. A worker that exits without the harness stopping
// or killing it (one declared dead stops itself) is replaced, as an
// orchestrator would replace it, once the database answers, so that the
// load goes on; checkExits judges whether the exit was one to expect.
func (s *suite) watch(p *fleet.Proc) {
	defer s.watching.Done()
	<-p.Done()
	code, _ := p.Wait(0)
	x := workerExit{pid: p.Pid(), code: code, at: time.Now(), declaredDead: declaredDead(p), why: lastError(p)}
	s.mu.Lock()
	if k, ok := s.ending[x.pid]; ok {
		x.by = &k
	}
	s.exits = append(s.exits, x)
	for _, px := range s.proxies[x.pid] {
		_ = px.Close()
	}
	delete(s.proxies, x.pid)
	s.mu.Unlock()
	if x.by != nil {
		return
	}
	fmt.Printf("chaos: pid %d exited with code %d (declared dead: %t; %s)\n", x.pid, x.code, x.declaredDead, x.why)
	s.waitDatabase(time.Minute)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return
	}
	if _, _, err := s.startLocked(false); err != nil {
		fmt.Println("chaos: replace a worker:", err)
		return
	}
	fmt.Printf("chaos: another worker started in place of pid %d\n", x.pid)
}

// waitDatabase waits up to timeout for the database to answer: a worker
// started while it is down (a restart) would fail to start, which says
// nothing about ferry's guarantees. Without a pool (tests) it returns.
func (s *suite) waitDatabase(timeout time.Duration) {
	if s.pool == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := s.pool.Ping(pctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lastError is the message and error of the last ERROR record p wrote, ""
// if none.
func lastError(p *fleet.Proc) string {
	lines := strings.Split(p.Stderr(), "\n")
	for _, line := range slices.Backward(lines) {
		if r, ok := fleet.ParseRecord(line); ok && r.Level == "ERROR" {
			if e, ok := r.Attrs["error"]; ok {
				return fmt.Sprintf("%s: %v", r.Msg, e)
			}
			return r.Msg
		}
	}
	return ""
}

// declaredDead says whether p logged that it was declared dead (the JSON
// record of liveness.Worker).
func declaredDead(p *fleet.Proc) bool {
	return strings.Contains(p.Stderr(), `"msg":"liveness: declared dead; stopping"`)
}

// expose records that the harness does kind to procs, now: before it does
// it, so that their exits are known to be its doing.
func (s *suite) expose(kind exposureKind, procs ...*fleet.Proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for _, p := range procs {
		s.exposures[p.Pid()] = append(s.exposures[p.Pid()], exposure{kind: kind, at: now})
		if kind == exposedKill || kind == exposedSIGTERM {
			s.ending[p.Pid()] = kind
		}
	}
}

// exposuresCopy is a copy of what the harness did, by pid.
func (s *suite) exposuresCopy() map[int][]exposure {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[int][]exposure, len(s.exposures))
	for pid, e := range s.exposures {
		out[pid] = slices.Clone(e)
	}
	return out
}

// killedAt is when the harness killed each process it killed, by pid.
func (s *suite) killedAt() map[int]time.Time {
	out := map[int]time.Time{}
	for pid, exps := range s.exposuresCopy() {
		for _, e := range exps {
			if e.kind == exposedKill {
				out[pid] = e.at
			}
		}
	}
	return out
}

// working is the live workers that are neither being stopped by the
// harness nor stopping themselves, declared dead.
func (s *suite) working() []*fleet.Proc {
	var out []*fleet.Proc
	for _, p := range s.workers.Live() {
		s.mu.Lock()
		_, ending := s.ending[p.Pid()]
		s.mu.Unlock()
		if !ending && !declaredDead(p) {
			out = append(out, p)
		}
	}
	return out
}

// waitWorking waits until n workers are working and have started (logged
// "ferry: started"), the replacements of those declared dead among them:
// the next fault begins on a fleet that is up, not on one still
// connecting, whose start a fault would fail for reasons that say nothing
// of ferry's guarantees.
func (s *suite) waitWorking(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		up := 0
		for _, p := range s.working() {
			if started(p) {
				up++
			}
		}
		if up >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d workers started after %s", up, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// started says whether p logged that it started (server.go's "ferry:
// started", written once River fetches jobs).
func started(p *fleet.Proc) bool {
	return strings.Contains(p.Stderr(), `"msg":"ferry: started"`)
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

func run(ctx context.Context, serverURL string, steady, marathon time.Duration, pooled bool) (bool, error) {
	s := newSuite()
	// A cluster of the suite's own, so that restarting it disturbs nobody
	// else: a primary and a synchronous standby for the failover fault, or
	// (-pgbouncer, whose PgBouncer points at one host) a primary alone.
	var primary, standby *pgcluster.Cluster
	var err error
	if pooled {
		primary, err = pgcluster.Start()
	} else {
		primary, standby, err = pgcluster.StartReplicated()
	}
	admin := serverURL
	if err != nil {
		s.notes = append(s.notes, "Postgres restart and primary failover skipped: "+err.Error())
		fmt.Println("chaos: using", redact.Postgres(serverURL), "-", s.notes[0])
	} else {
		defer primary.Stop()
		admin = primary.URL("postgres")
		if standby != nil {
			defer standby.Stop()
			fmt.Printf("chaos: a primary of its own on port %d, its synchronous standby on %d\n", primary.Port, standby.Port)
		} else {
			fmt.Println("chaos: a cluster of its own on port", primary.Port)
			s.notes = append(s.notes, "primary failover skipped: PgBouncer stands in front of one host")
		}
	}

	// A fresh database, migrated, with the oracle's tables.
	url, drop, err := scratchdb.New(ctx, admin, true)
	if err != nil {
		return false, fmt.Errorf("scratch database: %s", redact.Postgres(err.Error()))
	}
	defer func() { _ = drop() }()
	if standby != nil {
		// Every client follows the failover: both hosts, the writable one
		// wanted.
		if url, err = pgcluster.MultiHostURL(url, primary, standby); err != nil {
			return false, err
		}
	}
	s.url = url
	if s.pool, err = pgxpool.New(ctx, s.url); err != nil {
		return false, err
	}
	defer s.pool.Close()
	if _, err := s.pool.Exec(ctx, oracleSchema); err != nil {
		return false, err
	}
	s.jobURL, s.jobPool = s.url, s.pool
	if pooled {
		stop, err := s.startPgBouncer(ctx)
		if err != nil {
			return false, err
		}
		defer stop()
	}

	// The receiver: a real HTTP server that records each event id once
	// (UNIQUE) and counts every arrival; a keyed message's first arrival
	// is numbered (arrived), and its deliveries in flight counted by key.
	var inflight inFlight
	recv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, body, err := outbox.Verify(r, []byte(hookSecret), 0)
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var keyed keyedPayload
		_ = json.Unmarshal(body, &keyed)
		var key *string
		var n *int64
		if keyed.Key != "" {
			key, n = &keyed.Key, &keyed.N
			// In flight while its sender waits for the answer: a sender
			// that gave up (its timeout, while this handler waited on a
			// database in an outage) or died ends its connection, and its
			// retry is the next delivery, not a second one beside it.
			leave := sync.OnceFunc(inflight.enter(keyed.Key, id))
			defer context.AfterFunc(r.Context(), leave)()
			defer leave()
			time.Sleep(orderedHold)
		}
		if _, err := s.pool.Exec(r.Context(), `INSERT INTO chaos_received (event_id, ordering_key, n) VALUES ($1, $2, $3)
			ON CONFLICT (event_id) DO UPDATE SET arrivals = chaos_received.arrivals + 1`, id, key, n); err != nil {
			http.Error(w, "database", http.StatusServiceUnavailable)
			return
		}
		if key != nil {
			inflight.record(id)
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
limits:
  - {name: chaos-tenants, kind: chaos.limited, key: tenant, concurrency: %d}
queues:
  - {name: %s, workers: %d}
fairness:
  - {queue: %s, key: source}
outbox:
  routes:
    - {topic: chaos.event, name: receiver, url: "http://%s/hook", secret_env: CHAOS_HOOK_SECRET, timeout: 5s}
`, limitedConcurrency, fairQueue, fairWorkers, fairQueue, ln.Addr())
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

	// The marathon jobs: a few that run for the whole fault sequence and
	// past it, far longer than a worker's lease, through every fault.
	marathonUntil := windowStart.Add(marathon)
	marathons, err := s.insertMarathons(ctx, marathonUntil)
	if err != nil {
		return false, err
	}

	// The sampler and the load.
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var holders holderObs
	wg.Go(func() { holders = sampleHolders(loadCtx, s.pool, election.KeyElection) })
	var jobKeys, messages, rounds atomic.Int64
	var abandoned keySet
	wg.Go(func() { s.produceJobs(loadCtx, &jobKeys) })
	wg.Go(func() { s.produceMessages(loadCtx, &messages) })
	shapes := shapesFor(marathon < time.Minute) // -short's marathon is 30 s
	var wfs wfRun
	wg.Go(func() { s.produceWorkflows(loadCtx, shapes, &wfs) })
	var debounced dbRun
	wg.Go(func() { s.produceDebounced(loadCtx, &debounced) })
	var limited atomic.Int64
	wg.Go(func() { s.produceLimited(loadCtx, &limited) })
	var fair fairRun
	wg.Go(func() { s.produceFair(loadCtx, &fair) })

	time.Sleep(steady)
	faults := []struct {
		name string
		// failover: the fault ends the leader's term, and its gap is from
		// the fault to a leader running again.
		failover bool
		do       func() (note string, err error)
	}{
		{fmt.Sprintf("%d same-key outbox writers committing out of id order, from here on", 2*orderedKeys), false, func() (string, error) {
			wg.Go(func() { s.produceOrdered(loadCtx, &rounds, &abandoned) })
			return s.waitKeyed(ctx, 30*time.Second)
		}},
		{"kill -9 of the leader", true, func() (string, error) {
			p, _, err := s.leaderProc(ctx)
			if err != nil {
				return "", err
			}
			s.expose(exposedKill, p)
			_ = p.Kill()
			<-p.Done()
			_, err = s.start()
			return "", err
		}},
		{"pg_terminate_backend of the lock connection", true, func() (string, error) {
			p, h, err := s.leaderProc(ctx)
			if err != nil {
				return "", err
			}
			s.expose(exposedLockConn, p)
			_, err = s.pool.Exec(ctx, "SELECT pg_terminate_backend($1)", h.BackendPID)
			return "", err
		}},
		{fmt.Sprintf("pg_terminate_backend of a standby's liveness session, %d times", livenessKills), false, func() (string, error) {
			return s.killLivenessSessions(ctx)
		}},
		{fmt.Sprintf("SIGSTOP of a standby for %s (lease %s)", stallFor, lease.Round(time.Millisecond)), false, func() (string, error) {
			return s.stall(ctx)
		}},
		{fmt.Sprintf("SIGSTOP of a standby past its lease, for %s", pauseFor.Round(time.Millisecond)), false, func() (string, error) {
			return s.pause(ctx)
		}},
		{"a standby replaced by a worker whose registration COMMIT reply is lost", false, func() (string, error) {
			return s.lostReply(ctx)
		}},
		{fmt.Sprintf("network partition of the leader for %s", partitionFor.Round(time.Millisecond)), true, func() (string, error) {
			return "", s.partitionLeader(ctx)
		}},
		{fmt.Sprintf("network partition of a standby running jobs for %s", partitionFor.Round(time.Millisecond)), false, func() (string, error) {
			return s.partitionWorker(ctx)
		}},
		{"rolling SIGTERM restart of all workers", true, func() (string, error) {
			for _, p := range s.working() {
				s.expose(exposedSIGTERM, p)
				_ = p.Signal(syscall.SIGTERM)
				select {
				case <-p.Done():
				case <-time.After(40 * time.Second):
					return "", errors.New("a worker did not stop within 40s of SIGTERM")
				}
				if _, err := s.start(); err != nil {
					return "", err
				}
				time.Sleep(time.Second)
			}
			return "", nil
		}},
		{"pg_terminate_backend of every ferry backend", true, func() (string, error) {
			s.expose(exposedSessions, s.workers.Live()...)
			_, err := s.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND application_name LIKE 'ferry%' AND pid <> pg_backend_pid()`)
			return "", err
		}},
		{"Postgres restart", true, func() (string, error) {
			if primary == nil {
				return "", errSkip
			}
			s.expose(exposedRestart, s.workers.Live()...)
			return "", primary.Ctl("restart")
		}},
		{"primary failover: the primary crashed, its synchronous standby promoted", true, func() (string, error) {
			if standby == nil {
				return "", errSkip
			}
			return s.failover(ctx, primary, standby)
		}},
	}
	for _, f := range faults {
		// A worker declared dead by the last fault may still be stopping;
		// the next fault starts on a full fleet.
		if err := s.waitWorking(3, time.Minute); err != nil {
			fmt.Println("chaos: before", f.name+":", err)
		}
		at := time.Now()
		note, err := f.do()
		if errors.Is(err, errSkip) {
			s.faults = append(s.faults, faultResult{name: f.name, at: at, skipped: s.notes[len(s.notes)-1]})
			continue
		}
		if err != nil {
			stopLoad()
			wg.Wait()
			return false, fmt.Errorf("%s: %w", f.name, err)
		}
		if !f.failover {
			s.faults = append(s.faults, faultResult{name: f.name, at: at, note: note})
			fmt.Printf("chaos: %s: %s\n", f.name, note)
			time.Sleep(steady)
			continue
		}
		gap, err := s.waitLeaderRun(ctx, at, 60*time.Second)
		if err != nil {
			stopLoad()
			wg.Wait()
			return false, fmt.Errorf("%s: %w", f.name, err)
		}
		s.faults = append(s.faults, faultResult{name: f.name, at: at, gap: gap, note: note})
		leaderRuns++
		fmt.Printf("chaos: %s: a leader runs again after %s\n", f.name, gap.Round(time.Millisecond))
		if note != "" {
			fmt.Printf("chaos: %s: %s\n", f.name, note)
		}
		time.Sleep(steady)
	}
	stopLoad()
	wg.Wait()
	windowEnd := time.Now()

	cutoff, err := s.drain(ctx, windowEnd, max(2*time.Minute, time.Until(marathonUntil)+time.Minute))
	if err != nil {
		// Not fatal: the oracle shows what is missing.
		fmt.Println("chaos: drain:", err)
	}
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	live := s.workers.Live()
	s.expose(exposedSIGTERM, live...)
	for _, p := range live {
		_ = p.Signal(syscall.SIGTERM)
	}
	for _, p := range live {
		select {
		case <-p.Done():
		case <-time.After(40 * time.Second):
		}
	}
	_ = s.workers.Kill(time.Minute) // any left: their exits show it
	s.watching.Wait()

	// The oracle, on what committed.
	exposures := s.exposuresCopy()
	rows, rowsErr := observeWorkers(ctx, s.pool)
	stall := s.stalled
	stall.sparedObs = observeSpared(ctx, s.pool, stall.sparedObs, exposures[stall.pid], rows, s.exits)
	kills := s.kills
	kills.sparedObs = observeSpared(ctx, s.pool, kills.sparedObs, exposures[kills.pid], rows, s.exits)
	for _, o := range []*sparedObs{&stall.sparedObs, &kills.sparedObs} {
		if o.exit != nil || (o.row != nil && o.row.deadAt != nil) {
			o.evidence = lostEvidence(s.workers.Procs(), lostObs{pid: o.pid, clientID: o.clientID, at: o.at})
		}
	}
	lost := observeLostReply(ctx, s, s.lost, exposures[s.lost.pid], rows, s.exits)
	if rowsErr != nil {
		stall.err, kills.err, lost.err = rowsErr, rowsErr, rowsErr
	}
	runs := observeRuns(ctx, s.pool, s.killedAt(), leaderRuns)
	checks := []check{
		checkHolders(holders, outages(s.faults)),
		checkRuns(runs),
		checkTerms(runs),
		checkJobs(observeJobs(ctx, s.pool, jobKeys.Load()+marathons)),
		checkMarathons(observeMarathons(ctx, s.pool, marathons, marathon)),
		checkFinal(observeFinal(ctx, s.pool, cutoff)),
		checkOutbox(observeOutbox(ctx, s.pool, messages.Load())),
		checkTicks(observeTicks(ctx, s.pool, windowStart, windowEnd)),
		checkDeaths(deathObs{rows: rows, exposures: exposures, err: rowsErr}),
		checkOrdered(observeOrdered(ctx, s.pool, rounds.Load(), abandoned.list(), &inflight)),
		checkKills(kills),
		checkStall(stall),
		checkLost(namePause, observeLost(ctx, s, s.paused, rows, s.exits)),
		checkLostReply(lost),
		checkLost(namePartition, observeLost(ctx, s, s.cut, rows, s.exits)),
		checkDemotion(observeDemotion(ctx, s.pool, s.cutLeader)),
		checkExits(exitObs{exits: s.exits, exposures: exposures}),
		checkWorkflows(shapes, observeWorkflows(ctx, s.pool, &wfs)),
		checkDebounced(observeDebounced(ctx, s.pool, &debounced)),
		checkLimited(observeLimited(ctx, s.pool, limited.Load())),
		checkFair(observeFair(ctx, s.pool, &fair)),
	}
	attributeDeaths(s.faults, rows)
	return report(os.Stdout, s.faults, checks), nil
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

// drain waits until every job inserted so far is finalized, every
// message delivered, and a tick after the window's end recorded (so every
// tick in the window is), with nothing done for it: the rescues and the
// retries are ferry's and River's own. It returns the database's time of
// the snapshot that found it so (on a timeout, the time of the last one):
// the oracle's cut-off for "every job finalized".
func (s *suite) drain(ctx context.Context, windowEnd time.Time, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var last error
	cutoff := time.Now()
	for time.Now().Before(deadline) {
		var open, msgsLeft int
		var ticked bool
		var at time.Time
		err := s.pool.QueryRow(ctx, `SELECT clock_timestamp(),
			(SELECT count(*) FROM river_job WHERE state NOT IN ('completed', 'discarded', 'cancelled')),
			(SELECT count(*) FROM ferry_outbox WHERE status <> 'delivered'),
			EXISTS (SELECT 1 FROM ferry_periodic_tick WHERE schedule_id = 'chaos-tick' AND tick_at > $1)`, windowEnd).Scan(&at, &open, &msgsLeft, &ticked)
		if err == nil {
			cutoff = at
		}
		if err == nil && open == 0 && msgsLeft == 0 && ticked {
			return cutoff, nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("%d jobs not finalized, %d messages left; a tick after the window recorded: %t", open, msgsLeft, ticked)
		}
		time.Sleep(500 * time.Millisecond)
	}
	return cutoff, fmt.Errorf("not drained within %s: %w", timeout, last)
}

// marathonJobs is how many marathon jobs a run inserts: one a worker.
const marathonJobs = 3

// insertMarathons inserts the marathon jobs: chaos.effect jobs that sleep
// until the time until, with no job timeout, keyed marathon-N. It returns
// how many it inserted.
func (s *suite) insertMarathons(ctx context.Context, until time.Time) (int64, error) {
	ins, err := jobs.NewInserter(s.jobPool)
	if err != nil {
		return 0, err
	}
	for i := 1; i <= marathonJobs; i++ {
		key := fmt.Sprintf("marathon-%d", i)
		args := fmt.Sprintf(`{"key":%q,"until":%q}`, key, until.UTC().Format(time.RFC3339Nano))
		err := pgx.BeginFunc(ctx, s.jobPool, func(tx pgx.Tx) error {
			_, err := ins.InsertTx(ctx, tx, jobs.RawArgs{KindName: "chaos.effect", JSON: []byte(args)}, jobs.WithUniqueKey(nil, key))
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("insert %s: %w", key, err)
		}
	}
	return marathonJobs, nil
}

// produceJobs inserts chaos.effect jobs, each in a transaction of its own,
// at about 50 a second, every longEvery-th a long one; a failed insert (the database restarting) is
// retried with the same key until it commits.
func (s *suite) produceJobs(ctx context.Context, n *atomic.Int64) {
	ins, err := jobs.NewInserter(s.jobPool)
	if err != nil {
		// No job is inserted, and the oracle's job check fails on that.
		fmt.Println("chaos: job producer:", err)
		return
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for ctx.Err() == nil {
		i := n.Load() + 1
		key := fmt.Sprintf("job-%d", i)
		args := fmt.Sprintf(`{"key":%q}`, key)
		if i%longEvery == 0 {
			args = fmt.Sprintf(`{"key":%q,"sleep_ms":%d}`, key, longSleep.Milliseconds())
		}
		// The unique key makes a retry after an ambiguous failure (the
		// commit may have landed) return the job already inserted.
		err := pgx.BeginFunc(ctx, s.jobPool, func(tx pgx.Tx) error {
			_, err := ins.InsertTx(ctx, tx, jobs.RawArgs{KindName: "chaos.effect", JSON: []byte(args)}, jobs.WithUniqueKey(nil, key))
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
		_, err := s.jobPool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, dedup_key) VALUES ('chaos.event', '{}', $1)
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

// startPgBouncer puts a PgBouncer in transaction mode in front of the run's
// database and sends the job traffic through it: the workers run with
// FERRY_POOLER=transaction and their sessions on the direct URL, and the
// producers insert jobs and outbox rows through it, as services behind a
// pooler would.
func (s *suite) startPgBouncer(ctx context.Context) (stop func(), err error) {
	dir, err := os.MkdirTemp("", "ferry-chaos-pgbouncer-")
	if err != nil {
		return nil, err
	}
	u, stopBouncer, err := pgbouncer.Run(s.url, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err == nil {
		dburl.ApplyPooler(cfg.ConnConfig, dburl.PoolerTransaction)
		s.jobPool, err = pgxpool.NewWithConfig(ctx, cfg)
	}
	if err != nil {
		stopBouncer()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s.jobURL = u
	fmt.Println("chaos: job traffic through PgBouncer (transaction mode) at", redact.Postgres(u))
	return func() { s.jobPool.Close(); stopBouncer(); _ = os.RemoveAll(dir) }, nil
}
