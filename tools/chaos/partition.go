package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
)

// partitionFor is how long a partition fault lasts: past the worker's
// lease, so that Postgres ends its silent sessions, and by four ticks more,
// so that a leader has taken over (the lock session is reaped with the
// same lease, and a successor whose predecessor did not resign waits a
// tick and its timeout) and its rescuer has run before the partition
// heals.
const partitionFor = lease + 4*leaderTick

// proxied rewrites each host of the Postgres URL u (one, or several as
// in a multi-host URL) to a new network proxy in front of it; the caller
// closes them.
func proxied(u string) (string, []*netproxy.Proxy, error) {
	at := strings.Index(u, "@")
	if at < 0 {
		return "", nil, errors.New("database URL has no user@")
	}
	rest := u[at+1:]
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	var (
		addrs   []string
		proxies []*netproxy.Proxy
	)
	for host := range strings.SplitSeq(rest[:end], ",") {
		if _, _, err := net.SplitHostPort(host); err != nil {
			host = net.JoinHostPort(host, "5432")
		}
		p, err := netproxy.Start(host)
		if err != nil {
			for _, p := range proxies {
				_ = p.Close()
			}
			return "", nil, err
		}
		proxies = append(proxies, p)
		addrs = append(addrs, p.Addr())
	}
	return u[:at+1] + strings.Join(addrs, ",") + rest[end:], proxies, nil
}

// workerEnv is the environment of a new chaos worker: every connection it
// makes, job traffic and sessions alike, goes through network proxies of
// its own, which the partition faults blackhole. proxies are those
// proxies, to close when the worker is gone. With lostReply its sessions
// (liveness, election) go through proxies apart from its job traffic's,
// armed to lose the reply to the first COMMIT through them, its
// registration's (netproxy.DropReplyTo): armed is those proxies.
func (s *suite) workerEnv(lostReply bool) (env []string, proxies, armed []*netproxy.Proxy, err error) {
	closeAll := func() {
		for _, p := range proxies {
			_ = p.Close()
		}
	}
	jobURL, jp, err := proxied(s.jobURL)
	if err != nil {
		return nil, nil, nil, err
	}
	proxies = append(proxies, jp...)
	env = []string{"DATABASE_URL=" + jobURL, "FERRY_CONFIG=" + s.cfgFile, "CHAOS_HOOK_SECRET=" + hookSecret, "FERRY_LOG_FORMAT=json"}
	if s.jobURL != s.url || lostReply {
		sessionURL, sp, err := proxied(s.url)
		if err != nil {
			closeAll()
			return nil, nil, nil, err
		}
		proxies = append(proxies, sp...)
		env = append(env, "FERRY_SESSION_DATABASE_URL="+sessionURL)
		if s.jobURL != s.url {
			env = append(env, dburl.EnvPooler+"="+dburl.PoolerTransaction)
		}
		if lostReply {
			for _, p := range sp {
				p.DropReplyTo([]byte("commit"))
			}
			armed = sp
		}
	}
	return env, proxies, armed, nil
}

// partition blackholes every connection of p for d, then heals them.
func (s *suite) partition(p *fleet.Proc, d time.Duration) error {
	s.mu.Lock()
	proxies := s.proxies[p.Pid()]
	s.mu.Unlock()
	if len(proxies) == 0 {
		return fmt.Errorf("pid %d has no network proxy to partition", p.Pid())
	}
	for _, x := range proxies {
		x.Partition()
	}
	time.Sleep(d)
	for _, x := range proxies {
		x.Heal()
	}
	return nil
}

// partitionLeader cuts the leader off from Postgres, both ways, with
// nothing closed, for partitionFor: it must demote itself within a tick
// and its timeout, the server must free its lock through the session
// lease, and a standby lead, never two at once (the holder sampler and the
// leader runs say so).
func (s *suite) partitionLeader(ctx context.Context) error {
	p, _, err := s.leaderProc(ctx)
	if err != nil {
		return err
	}
	s.expose(exposedPartition, p)
	s.cutLeader = demotionObs{pid: p.Pid(), at: time.Now()}
	err = s.partition(p, partitionFor)
	s.cutLeader.reason, s.cutLeader.logged = demotedRecord(p, s.cutLeader.at)
	return err
}

// demotedRecord finds p's first "election: demoted" record since t and
// says why its elector demoted it.
func demotedRecord(p *fleet.Proc, t time.Time) (reason string, ok bool) {
	for line := range strings.SplitSeq(p.Stderr(), "\n") {
		r, found := fleet.ParseRecord(line)
		if found && r.Msg == "election: demoted" && !r.Time.Before(t) {
			return strings.ReplaceAll(fmt.Sprint(r.Attrs["reason"]), "\n", "; "), true
		}
	}
	return "", false
}

// demotionObs is the leader partition fault: the leader cut off and when;
// when its leader run ended by its own clock (chaos_leader_run.stopped_at,
// taken the moment its runnables were cancelled and written once it could
// reach the database again); its elector's demotion record; and when the
// next leader run began.
type demotionObs struct {
	pid     int
	at      time.Time
	stopped *time.Time
	reason  string
	logged  bool
	next    *time.Time
	err     error
}

func observeDemotion(ctx context.Context, pool *pgxpool.Pool, o demotionObs) demotionObs {
	if o.pid == 0 {
		return o
	}
	err := pool.QueryRow(ctx, `SELECT (SELECT stopped_at FROM chaos_leader_run WHERE pid = $1 AND started_at < $2 ORDER BY started_at DESC LIMIT 1),
		(SELECT min(started_at) FROM chaos_leader_run WHERE started_at > $2)`, o.pid, o.at).Scan(&o.stopped, &o.next)
	if err != nil {
		o.err = fmt.Errorf("read the leader runs around the partition: %w", err)
	}
	return o
}

// checkDemotion: a leader cut off from Postgres (no reset, no error, just
// silence) is demoted by its own ownership check, which times out, and
// stops acting before the next leader starts. The time it took is shown,
// not judged: its bound, a tick and its timeout, is a figure of the bench.
func checkDemotion(o demotionObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameDemotion, verdictUnverified, "%v", o.err)
	case o.pid == 0:
		return newCheck(nameDemotion, verdictUnverified, "no leader was cut off: nothing to check")
	case o.stopped == nil:
		return newCheck(nameDemotion, verdictUnverified, "pid %d's leader run has no recorded end", o.pid)
	case o.next == nil:
		return newCheck(nameDemotion, verdictUnverified, "no leader run began after pid %d was cut off", o.pid)
	case !o.logged:
		return newCheck(nameDemotion, verdictViolated, "pid %d logged no demotion after it was cut off", o.pid)
	}
	result := fmt.Sprintf("pid %d stopped leading %s after it was cut off (tick %s, timeout %s; demoted: %s), the next leader began at %s",
		o.pid, o.stopped.Sub(o.at).Round(time.Millisecond), leaderTick, tickTimeout.Round(time.Millisecond), o.reason, o.next.Sub(o.at).Round(time.Millisecond))
	if !strings.Contains(o.reason, "ownership check") || !o.stopped.Before(*o.next) {
		return newCheck(nameDemotion, verdictViolated, "%s", result)
	}
	return newCheck(nameDemotion, verdictOK, "%s", result)
}

// busyStandby waits up to 20 s for a standby (not the leader) that runs a
// long job, and returns it with its client id and its running jobs. A
// standby, because a leader cut off or stopped could not rescue its own
// jobs: the fault would prove nothing.
func (s *suite) busyStandby(ctx context.Context) (p *fleet.Proc, clientID string, running, long int, err error) {
	leader, _, err := s.leaderProc(ctx)
	if err != nil {
		return nil, "", 0, 0, err
	}
	procs := map[int]*fleet.Proc{}
	var pids []int32
	for _, p := range s.working() {
		if p != leader {
			procs[p.Pid()] = p
			pids = append(pids, int32(p.Pid()))
		}
	}
	var pid int
	deadline := time.Now().Add(20 * time.Second)
	for long == 0 {
		if time.Now().After(deadline) {
			return nil, "", 0, 0, errors.New("no standby ran a long job within 20s")
		}
		err := s.pool.QueryRow(ctx, `SELECT w.pid, w.client_id, count(*), count(*) FILTER (WHERE j.args ? 'sleep_ms')
			FROM ferry_worker w JOIN river_job j ON j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] = w.client_id
			WHERE w.pid = ANY($1) AND w.dead_at IS NULL AND w.stopped_at IS NULL
			GROUP BY w.pid, w.client_id ORDER BY 4 DESC, 3 DESC LIMIT 1`, pids).Scan(&pid, &clientID, &running, &long)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, "", 0, 0, err
		}
		if long == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	return procs[pid], clientID, running, long, nil
}

// partitionWorker cuts off, for partitionFor, the standby running the most
// long jobs: its liveness session goes silent, Postgres ends it after the
// lease, the leader declares the worker dead and rescues its jobs, and the
// worker, when the partition heals, learns it and stops itself; its late
// completions are refused by the fence (the job effects check sees none
// twice).
func (s *suite) partitionWorker(ctx context.Context) (string, error) {
	p, clientID, running, long, err := s.busyStandby(ctx)
	if err != nil {
		return "", err
	}
	s.expose(exposedPartition, p)
	at := time.Now()
	if err := s.partition(p, partitionFor); err != nil {
		return "", err
	}
	s.cut = lostObs{how: "cut off", pid: p.Pid(), clientID: clientID, at: at, lasted: time.Since(at), running: running, long: long}
	return fmt.Sprintf("pid %d cut off %s running %d jobs, %d long", p.Pid(), s.cut.lasted.Round(time.Millisecond), running, long), nil
}

// lostObs is a fault that takes a worker from Postgres past its lease
// while it runs long jobs (a partition, a SIGSTOP): which worker, how and
// for how long, what it ran then, and, at the end, whether the rescuer
// declared it dead while it ran, how many jobs' errors say they were
// rescued from it and how many of those completed, and how it exited.
type lostObs struct {
	how           string // "cut off", "stopped"
	pid           int
	clientID      string
	at            time.Time
	lasted        time.Duration
	running, long int
	dead          bool
	rescued       int64
	completed     int64 // completed, or cancelled with its workflow
	withWorkflow  int64 // of those, cancelled with its workflow
	// exit is its exit after the fault, nil while it runs.
	exit *workerExit
	// evidence is, when it was not declared dead, what the logs say of it
	// after the fault: the rescuer's records that name it and its own
	// liveness records, counted by message.
	evidence string
	err      error
}

func observeLost(ctx context.Context, s *suite, o lostObs, rows []workerRow, exits []workerExit) lostObs {
	if o.pid == 0 {
		return o
	}
	for _, r := range rows {
		if r.pid == o.pid && r.diedRunning() && !r.deadAt.Before(o.at) {
			o.dead = true
		}
	}
	for _, x := range exits {
		if x.pid == o.pid && !x.at.Before(o.at) {
			o.exit = &x
		}
	}
	// A rescued step of a workflow cancelled meanwhile ends cancelled, as
	// its workflow says: done, not lost.
	err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT j.id),
			count(DISTINCT j.id) FILTER (WHERE j.state = 'completed' OR (j.state = 'cancelled'
				AND EXISTS (SELECT 1 FROM ferry_workflow w WHERE w.id = j.metadata->>'ferry_workflow' AND w.state = 'cancelled'))),
			count(DISTINCT j.id) FILTER (WHERE j.state = 'cancelled'
				AND EXISTS (SELECT 1 FROM ferry_workflow w WHERE w.id = j.metadata->>'ferry_workflow' AND w.state = 'cancelled'))
		FROM river_job j, unnest(j.errors) e
		WHERE strpos(e->>'error', $1) > 0 AND (e->>'at')::timestamptz >= $2`, o.clientID, o.at).Scan(&o.rescued, &o.completed, &o.withWorkflow)
	if err != nil {
		o.err = fmt.Errorf("count jobs rescued from the worker %s: %w", o.how, err)
	}
	if !o.dead || o.rescued == 0 {
		o.evidence = lostEvidence(s.workers.Procs(), o)
	}
	return o
}

// lostEvidence counts, by process and message, the records after the
// fault that say what became of the lost worker: the rescuer's records
// naming its client id, and its own liveness records.
func lostEvidence(procs []*fleet.Proc, o lostObs) string {
	counts := map[string]int{}
	var order []string
	for _, p := range procs {
		for line := range strings.SplitSeq(p.Stderr(), "\n") {
			r, ok := fleet.ParseRecord(line)
			if !ok || r.Time.Before(o.at) {
				continue
			}
			own := p.Pid() == o.pid && strings.HasPrefix(r.Msg, "liveness:")
			if !own && !(strings.HasPrefix(r.Msg, "rescue:") && r.Attrs["worker"] == o.clientID) {
				continue
			}
			k := fmt.Sprintf("pid %d %q", p.Pid(), r.Msg)
			if counts[k] == 0 {
				order = append(order, k)
			}
			counts[k]++
		}
	}
	if len(order) == 0 {
		return "no record of it after the fault"
	}
	parts := make([]string, len(order))
	for i, k := range order {
		parts[i] = fmt.Sprintf("%s x%d", k, counts[k])
	}
	return strings.Join(parts, "; ")
}

// checkLost: a worker taken from Postgres past its lease while running
// long jobs (cut off, or stopped) is declared dead and its jobs rescued
// and completed elsewhere by ferry's liveness, not left running under a
// worker no one hears from; the worker, back, learns it and stops itself
// (exit code 1). That its own late completions are refused is the job
// effects check's: none twice.
func checkLost(name string, o lostObs) check {
	switch {
	case o.err != nil:
		return newCheck(name, verdictUnverified, "query failed: %v", o.err)
	case o.pid == 0:
		return newCheck(name, verdictUnverified, "no worker was %s: nothing to check", o.how)
	case o.long == 0:
		return newCheck(name, verdictUnverified, "pid %d had no long job running when %s: nothing to rescue", o.pid, o.how)
	}
	result := fmt.Sprintf("pid %d %s for %s running %d jobs, %d of them long", o.pid, o.how, o.lasted.Round(time.Millisecond), o.running, o.long)
	exit := "still running"
	if o.exit != nil {
		exit = fmt.Sprintf("exited with code %d (declared dead: %t)", o.exit.code, o.exit.declaredDead)
	}
	switch {
	case !o.dead || o.rescued == 0:
		return newCheck(name, verdictViolated, "%s: declared dead %t, %d jobs rescued from it (logs: %s)", result, o.dead, o.rescued, o.evidence)
	case o.completed < o.rescued:
		return newCheck(name, verdictViolated, "%s: declared dead, %d jobs rescued from it, only %d of them completed", result, o.rescued, o.completed)
	case o.exit == nil || o.exit.code != 1 || !o.exit.declaredDead:
		return newCheck(name, verdictViolated, "%s: declared dead, %d jobs rescued from it and completed, but %s", result, o.rescued, exit)
	}
	if o.withWorkflow > 0 {
		exit = fmt.Sprintf("%d of them steps cancelled with their workflow; %s", o.withWorkflow, exit)
	}
	return newCheck(name, verdictOK, "%s: declared dead, %d jobs rescued from it and completed; %s", result, o.rescued, exit)
}
