package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The oracle fails closed. Each check is a function of what was observed,
// and an observation that could not be made (a query error) or that holds
// nothing (no run, no job, no tick, no sample) fails its check as
// unverified: a guarantee is held only when there was something to hold it
// against.

// oracleSchema is the suite's own tables: what the chaos workers and the
// receiver write for the oracle to read.
const oracleSchema = `
	CREATE TABLE chaos_effect (id bigserial PRIMARY KEY, key text NOT NULL, job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE INDEX chaos_effect_key ON chaos_effect (key);
	CREATE TABLE chaos_received (event_id text PRIMARY KEY, arrivals int NOT NULL DEFAULT 1,
		ordering_key text, n bigint, arrived bigint GENERATED ALWAYS AS IDENTITY);
	CREATE TABLE chaos_leader_run (id bigserial PRIMARY KEY, pid int NOT NULL, term bigint NOT NULL,
		started_at timestamptz NOT NULL, stopped_at timestamptz);
	CREATE TABLE chaos_wf_start (job_id bigint NOT NULL, workflow text NOT NULL, step text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE TABLE chaos_wf_violation (job_id bigint NOT NULL, workflow text NOT NULL, step text NOT NULL,
		open_deps int NOT NULL, outputs_missing int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE TABLE chaos_db_run (job_id bigint NOT NULL, key text NOT NULL, seq int NOT NULL, others int NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE TABLE chaos_limit_run (job_id bigint NOT NULL, tenant text NOT NULL, others int NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE TABLE chaos_fair_run (job_id bigint NOT NULL, source text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp());`

// verdict is a check's outcome. Only verdictOK passes.
type verdict int

const (
	verdictOK         verdict = iota
	verdictViolated           // the observation contradicts the guarantee
	verdictUnverified         // there was nothing to check it against
)

func (v verdict) String() string {
	switch v {
	case verdictOK:
		return "ok"
	case verdictViolated:
		return "VIOLATED"
	default:
		return "UNVERIFIED (fails)"
	}
}

type check struct {
	name, result string
	verdict      verdict
}

func (c check) ok() bool { return c.verdict == verdictOK }

func newCheck(name string, v verdict, format string, args ...any) check {
	return check{name: name, verdict: v, result: fmt.Sprintf(format, args...)}
}

// Names of the checks, in the order the table prints them.
const (
	nameHolders   = "holders of the lock, sampled every 100 ms"
	nameRuns      = "leader runs overlapping in time"
	nameTerms     = "each leader's term above every earlier one's"
	nameJobs      = "job effects at least once, never twice"
	nameFinal     = "jobs finalized by the end of the run"
	nameMarathon  = "marathon jobs, far longer than a lease, complete"
	nameOutbox    = "outbox effects exactly once"
	nameTicks     = "ticks in the window recorded exactly once"
	nameDead      = "workers declared dead only after the harness ended their sessions"
	nameStall     = "SIGSTOP under the lease: no job rescued from the stopped worker"
	nameExits     = "workers exited only when stopped, killed or declared dead"
	namePartition = "a worker cut off past its lease: declared dead, its jobs rescued"
	nameDemotion  = "a leader cut off is demoted by its own check, before the next leads"
	nameKills     = "liveness session killed again and again: its worker spared"
	namePause     = "SIGSTOP past the lease: declared dead, its jobs rescued, it exits"
	nameLostReply = "a registration COMMIT's reply lost: the worker registers and works"
	nameOrdered   = "same-key outbox writers out of id order: one message of a key at a time, each once"
	outageMargin  = 2 * time.Second
	sampleEvery   = 100 * time.Millisecond
)

// sampleFailure is a holder sample whose query failed.
type sampleFailure struct {
	at  time.Time
	err error
}

// holderObs is what the sampler saw: how many samples it took, how many
// holders of the election lock the largest showed, and the samples that
// failed.
type holderObs struct {
	samples    int   // samples that returned a count
	withHolder int   // of those, samples that saw a holder
	max        int32 // the largest count
	failures   []sampleFailure
}

// outage is a stretch of time in which the database may refuse queries: a
// fault until a leader runs again after it, and a margin.
type outage struct{ from, to time.Time }

func outages(faults []faultResult) []outage {
	var out []outage
	for _, f := range faults {
		if f.skipped == "" {
			out = append(out, outage{from: f.at, to: f.at.Add(f.gap + outageMargin)})
		}
	}
	return out
}

// sampleHolders counts the granted holders of the election lock every
// sampleEvery until ctx ends.
func sampleHolders(ctx context.Context, pool *pgxpool.Pool, key int64) holderObs {
	var o holderObs
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		var n int32
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 0 AND objid = $1::bigint::oid
			AND objsubid = 1 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, key).Scan(&n)
		switch {
		case ctx.Err() != nil:
			return o // the end of the window, not a failed sample
		case err != nil:
			o.failures = append(o.failures, sampleFailure{at: time.Now(), err: err})
		default:
			o.samples++
			if n > 0 {
				o.withHolder++
			}
			o.max = max(o.max, n)
		}
		select {
		case <-ctx.Done():
			return o
		case <-t.C:
		}
	}
}

// checkHolders: never two holders. A sample that failed outside a fault's
// outage, no sample at all, or no holder in any sample (the sampler is not
// looking at the election lock) leaves the check unverified.
func checkHolders(o holderObs, during []outage) check {
	var outside []sampleFailure
	for _, f := range o.failures {
		in := false
		for _, w := range during {
			if !f.at.Before(w.from) && !f.at.After(w.to) {
				in = true
				break
			}
		}
		if !in {
			outside = append(outside, f)
		}
	}
	switch {
	case len(outside) > 0:
		return newCheck(nameHolders, verdictUnverified, "%d samples failed outside the faults' outages (at %s: %v)",
			len(outside), outside[0].at.UTC().Format("15:04:05.000"), outside[0].err)
	case o.samples == 0:
		return newCheck(nameHolders, verdictUnverified, "0 samples taken (%d failed): nothing to check", len(o.failures))
	case o.max == 0:
		return newCheck(nameHolders, verdictUnverified, "max 0 in %d samples: no sample saw a holder, so none looked at the election lock", o.samples)
	case o.max > 1:
		return newCheck(nameHolders, verdictViolated, "max %d in %d samples", o.max, o.samples)
	}
	return newCheck(nameHolders, verdictOK, "max 1 in %d samples (%d with a holder; %d failed during the faults' outages)",
		o.samples, o.withHolder, len(o.failures))
}

// leaderRun is one row of chaos_leader_run.
type leaderRun struct {
	pid     int
	term    int64
	start   time.Time
	stopped *time.Time
}

// runObs is every leader run recorded, with the moments the suite killed
// processes (a killed process records no end) and the number of runs the
// suite saw start (one at the beginning, one after each fault).
type runObs struct {
	runs     []leaderRun
	killedAt map[int]time.Time
	want     int
	err      error
}

func observeRuns(ctx context.Context, pool *pgxpool.Pool, killedAt map[int]time.Time, want int) runObs {
	o := runObs{killedAt: killedAt, want: want}
	rows, err := pool.Query(ctx, "SELECT pid, term, started_at, stopped_at FROM chaos_leader_run ORDER BY started_at, id")
	if err != nil {
		o.err = fmt.Errorf("read chaos_leader_run: %w", err)
		return o
	}
	defer rows.Close()
	for rows.Next() {
		var r leaderRun
		if err := rows.Scan(&r.pid, &r.term, &r.start, &r.stopped); err != nil {
			o.err = fmt.Errorf("read chaos_leader_run: %w", err)
			return o
		}
		o.runs = append(o.runs, r)
	}
	if err := rows.Err(); err != nil {
		o.err = fmt.Errorf("read chaos_leader_run: %w", err)
	}
	return o
}

// checkRuns: each leader run starts after every earlier one ended (its
// recorded stop, or the moment its process was killed). A run with no end
// that another run follows leaves the check unverified: the overlap cannot
// be ruled out.
func checkRuns(o runObs) check {
	if o.err != nil {
		return newCheck(nameRuns, verdictUnverified, "query failed: %v", o.err)
	}
	if len(o.runs) == 0 {
		return newCheck(nameRuns, verdictUnverified, "0 overlaps in 0 runs: nothing to check")
	}
	if len(o.runs) < o.want {
		return newCheck(nameRuns, verdictUnverified, "%d runs recorded, but the suite saw %d start", len(o.runs), o.want)
	}
	overlaps, unended := 0, 0
	var end time.Time // the latest end of the runs so far
	for i, r := range o.runs {
		if i > 0 && r.start.Before(end) {
			overlaps++
		}
		switch {
		case r.stopped != nil:
			end = later(end, *r.stopped)
		case !o.killedAt[r.pid].IsZero():
			end = later(end, o.killedAt[r.pid])
		case i < len(o.runs)-1:
			unended++
			end = later(end, r.start)
		}
	}
	switch {
	case overlaps > 0:
		return newCheck(nameRuns, verdictViolated, "%d overlaps in %d runs", overlaps, len(o.runs))
	case unended > 0:
		return newCheck(nameRuns, verdictUnverified, "%d of %d runs have no recorded end and are followed by another: an overlap cannot be ruled out", unended, len(o.runs))
	}
	return newCheck(nameRuns, verdictOK, "0 overlaps in %d runs", len(o.runs))
}

// checkTerms: each leader run's term is above every earlier run's, across
// every fault, the primary failover among them (a new primary's term
// sequence must go on from where the old one's stood, so that a fenced
// write of an old term can never pass for a newer one).
func checkTerms(o runObs) check {
	if o.err != nil {
		return newCheck(nameTerms, verdictUnverified, "query failed: %v", o.err)
	}
	if len(o.runs) < 2 {
		return newCheck(nameTerms, verdictUnverified, "%d leader runs: no succession to check", len(o.runs))
	}
	var bad []string
	for i := 1; i < len(o.runs); i++ {
		if o.runs[i].term <= o.runs[i-1].term {
			bad = append(bad, fmt.Sprintf("term %d (pid %d) after term %d (pid %d)", o.runs[i].term, o.runs[i].pid, o.runs[i-1].term, o.runs[i-1].pid))
		}
	}
	if len(bad) > 0 {
		return newCheck(nameTerms, verdictViolated, "%d runs: %s", len(o.runs), strings.Join(bad, "; "))
	}
	return newCheck(nameTerms, verdictOK, "%d runs, terms %d to %d, each above the last", len(o.runs), o.runs[0].term, o.runs[len(o.runs)-1].term)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// jobObs counts, in one snapshot, the chaos.effect jobs that committed
// (distinct keys), the effects, the committed jobs without an effect and
// those with more than one; acknowledged is how many inserts the producer
// saw commit.
type jobObs struct {
	committed, acknowledged, effects, missing, doubled int64
	err                                                error
}

func observeJobs(ctx context.Context, pool *pgxpool.Pool, acknowledged int64) jobObs {
	o := jobObs{acknowledged: acknowledged}
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(DISTINCT args->>'key') FROM river_job WHERE kind = 'chaos.effect'),
		(SELECT count(*) FROM chaos_effect),
		(SELECT count(DISTINCT j.args->>'key') FROM river_job j WHERE j.kind = 'chaos.effect'
			AND NOT EXISTS (SELECT 1 FROM chaos_effect e WHERE e.key = j.args->>'key')),
		(SELECT count(*) FROM (SELECT key FROM chaos_effect GROUP BY key HAVING count(*) > 1) d)`).Scan(&o.committed, &o.effects, &o.missing, &o.doubled)
	if err != nil {
		o.err = fmt.Errorf("count jobs and effects: %w", err)
	}
	return o
}

// checkJobs: every committed job has its effect, and none the producer saw
// commit is missing. No job has two: a job's effect commits in the
// transaction that completes it, so a second effect would mean that two
// attempts completed one job (a rescued attempt not fenced off). The truth
// is what committed: a producer whose statement committed just as its
// context ended never counted it.
func checkJobs(o jobObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameJobs, verdictUnverified, "query failed: %v", o.err)
	case o.committed == 0:
		return newCheck(nameJobs, verdictUnverified, "0 jobs committed (%d acknowledged): nothing to check", o.acknowledged)
	}
	v := verdictOK
	if o.missing != 0 || o.doubled != 0 || o.committed < o.acknowledged {
		v = verdictViolated
	}
	return newCheck(nameJobs, v, "%d jobs committed (%d acknowledged to the producer), %d effects, %d missing, %d with two or more",
		o.committed, o.acknowledged, o.effects, o.missing, o.doubled)
}

// marathonJob is a marathon job as the run left it.
type marathonJob struct {
	key, state  string
	attempt     int
	ranTo       bool // completed at or after its until: it ran its whole time
	rescues     int  // its attempts that ferry's rescue ended
	otherErrors int  // its attempts that ended otherwise (a SIGTERM's cancellation)
}

type marathonObs struct {
	inserted int64
	length   time.Duration
	jobs     []marathonJob
	err      error
}

func observeMarathons(ctx context.Context, pool *pgxpool.Pool, inserted int64, length time.Duration) marathonObs {
	o := marathonObs{inserted: inserted, length: length}
	rows, err := pool.Query(ctx, `SELECT args->>'key', state::text, attempt,
			coalesce(finalized_at >= (args->>'until')::timestamptz, false),
			(SELECT count(*) FROM unnest(errors) e WHERE e->>'error' LIKE 'ferry: the worker running this job died%'),
			(SELECT count(*) FROM unnest(errors) e WHERE e->>'error' NOT LIKE 'ferry: the worker running this job died%')
		FROM river_job WHERE kind = 'chaos.effect' AND args->>'key' LIKE 'marathon-%' ORDER BY args->>'key'`)
	if err != nil {
		o.err = fmt.Errorf("read the marathon jobs: %w", err)
		return o
	}
	o.jobs, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (marathonJob, error) {
		var j marathonJob
		return j, row.Scan(&j.key, &j.state, &j.attempt, &j.ranTo, &j.rescues, &j.otherErrors)
	})
	if err != nil {
		o.err = fmt.Errorf("read the marathon jobs: %w", err)
	}
	return o
}

// checkMarathons: every marathon job, running through the faults far
// longer than a worker's lease, completed, and at or after its time (an
// attempt ended early by a rescue of a live worker would show as an effect
// before it, which checkJobs and checkDeaths see too). The result shows
// how each one's attempts ended: rescued from workers the harness killed
// or cut off, or cancelled by a SIGTERM's shutdown.
func checkMarathons(o marathonObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameMarathon, verdictUnverified, "query failed: %v", o.err)
	case len(o.jobs) == 0:
		return newCheck(nameMarathon, verdictUnverified, "0 marathon jobs found (%d inserted): nothing to check", o.inserted)
	}
	v := verdictOK
	var each []string
	for _, j := range o.jobs {
		e := fmt.Sprintf("%s %s in %d attempts (%d rescued, %d interrupted)", j.key, j.state, j.attempt, j.rescues, j.otherErrors)
		if j.state != "completed" || !j.ranTo {
			v = verdictViolated
			if j.state == "completed" {
				e += " BEFORE ITS TIME"
			}
		}
		each = append(each, e)
	}
	if int64(len(o.jobs)) != o.inserted {
		v = verdictViolated
	}
	return newCheck(nameMarathon, v, "%d of %d jobs of %s: %s", len(o.jobs), o.inserted, o.length, strings.Join(each, "; "))
}

// finalGroup is the jobs of one kind in one state; for discarded and
// cancelled jobs, of one last error (why), nil when none is recorded.
type finalGroup struct {
	kind, state string
	reason      *string
	n           int64
}

// finalObs is every job inserted up to cutoff (the end of the drain), by
// kind and state.
type finalObs struct {
	cutoff time.Time
	groups []finalGroup
	err    error
}

func observeFinal(ctx context.Context, pool *pgxpool.Pool, cutoff time.Time) finalObs {
	o := finalObs{cutoff: cutoff}
	rows, err := pool.Query(ctx, `SELECT kind, state::text, reason, count(*) FROM (
			SELECT kind, state, CASE WHEN state IN ('discarded', 'cancelled') THEN errors[cardinality(errors)]->>'error' END AS reason
			FROM river_job WHERE created_at <= $1) j
		GROUP BY kind, state, reason ORDER BY kind, state, reason`, cutoff)
	if err != nil {
		o.err = fmt.Errorf("count jobs by state: %w", err)
		return o
	}
	o.groups, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (finalGroup, error) {
		var g finalGroup
		return g, row.Scan(&g.kind, &g.state, &g.reason, &g.n)
	})
	if err != nil {
		o.err = fmt.Errorf("count jobs by state: %w", err)
	}
	return o
}

// checkFinal: every job inserted by the end of the drain, of every kind,
// is finalized, with no UPDATE by the harness: completed, or discarded or
// cancelled with the reason recorded (the table says which). A job still
// available, scheduled, retryable or running violates it.
func checkFinal(o finalObs) check {
	if o.err != nil {
		return newCheck(nameFinal, verdictUnverified, "query failed: %v", o.err)
	}
	var total, completed int64
	var open, unexplained, ended []string
	byKind := map[string]int64{}
	for _, g := range o.groups {
		total += g.n
		byKind[g.kind] += g.n
		switch {
		case g.state == "completed":
			completed += g.n
		case (g.state == "discarded" || g.state == "cancelled") && g.reason != nil:
			ended = append(ended, fmt.Sprintf("%d %s %s: %q", g.n, g.kind, g.state, *g.reason))
		case g.state == "discarded" || g.state == "cancelled":
			unexplained = append(unexplained, fmt.Sprintf("%d %s %s", g.n, g.kind, g.state))
		default:
			open = append(open, fmt.Sprintf("%d %s %s", g.n, g.kind, g.state))
		}
	}
	if total == 0 {
		return newCheck(nameFinal, verdictUnverified, "0 jobs inserted by %s: nothing to check", o.cutoff.UTC().Format("15:04:05"))
	}
	var kinds []string
	for _, k := range slices.Sorted(maps.Keys(byKind)) {
		kinds = append(kinds, fmt.Sprintf("%d %s", byKind[k], k))
	}
	result := fmt.Sprintf("%d jobs (%s), %d completed", total, strings.Join(kinds, ", "), completed)
	if len(ended) > 0 {
		result += "; " + strings.Join(ended, ", ")
	}
	switch {
	case len(open) > 0:
		return newCheck(nameFinal, verdictViolated, "%s; not finalized: %s", result, strings.Join(open, ", "))
	case len(unexplained) > 0:
		return newCheck(nameFinal, verdictViolated, "%s; with no reason recorded: %s", result, strings.Join(unexplained, ", "))
	}
	return newCheck(nameFinal, verdictOK, "%s, 0 not finalized", result)
}

// outboxObs counts, in one snapshot, the outbox messages that committed,
// those the receiver took (once each, and the extra arrivals it absorbed),
// and those it never took; acknowledged is how many writes the producer saw
// commit.
type outboxObs struct {
	committed, acknowledged, received, lost, redeliveries int64
	err                                                   error
}

func observeOutbox(ctx context.Context, pool *pgxpool.Pool, acknowledged int64) outboxObs {
	o := outboxObs{acknowledged: acknowledged}
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM ferry_outbox),
		(SELECT count(*) FROM chaos_received),
		(SELECT coalesce(sum(arrivals - 1), 0) FROM chaos_received),
		(SELECT count(*) FROM ferry_outbox o WHERE NOT EXISTS (SELECT 1 FROM chaos_received r WHERE r.event_id = o.id::text))`).
		Scan(&o.committed, &o.received, &o.redeliveries, &o.lost)
	if err != nil {
		o.err = fmt.Errorf("count messages and arrivals: %w", err)
	}
	return o
}

// checkOutbox: every committed message reached the receiver, and each is
// recorded there once.
func checkOutbox(o outboxObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameOutbox, verdictUnverified, "query failed: %v", o.err)
	case o.committed == 0:
		return newCheck(nameOutbox, verdictUnverified, "0 messages committed (%d acknowledged): nothing to check", o.acknowledged)
	}
	v := verdictOK
	if o.received != o.committed || o.lost != 0 || o.committed < o.acknowledged {
		v = verdictViolated
	}
	return newCheck(nameOutbox, v, "%d messages committed (%d acknowledged), %d received once each, %d lost, %d wire redeliveries absorbed",
		o.committed, o.acknowledged, o.received, o.lost, o.redeliveries)
}

// tickObs counts the chaos-tick ticks recorded in [from, to], and of them
// those recorded as skipped (missed while no leader ran).
type tickObs struct {
	from, to       time.Time
	ticks, skipped int64
	err            error
}

func observeTicks(ctx context.Context, pool *pgxpool.Pool, from, to time.Time) tickObs {
	o := tickObs{from: from, to: to}
	err := pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE status = 'skipped')
		FROM ferry_periodic_tick WHERE schedule_id = 'chaos-tick' AND tick_at BETWEEN $1 AND $2`, from, to).Scan(&o.ticks, &o.skipped)
	if err != nil {
		o.err = fmt.Errorf("count ticks: %w", err)
	}
	return o
}

// ticksIn is the number of ticks of an every-1s schedule (whole seconds
// since the epoch) in [from, to].
func ticksIn(from, to time.Time) int64 {
	first := from.Truncate(time.Second)
	if first.Before(from) {
		first = first.Add(time.Second)
	}
	last := to.Truncate(time.Second)
	if last.Before(first) {
		return 0
	}
	return int64(last.Sub(first)/time.Second) + 1
}

// checkTicks: every whole second of the window has its tick recorded, once
// (the table's primary key makes two impossible).
func checkTicks(o tickObs) check {
	want := ticksIn(o.from, o.to)
	span := fmt.Sprintf("%s to %s", o.from.UTC().Format("15:04:05"), o.to.UTC().Format("15:04:05"))
	switch {
	case o.err != nil:
		return newCheck(nameTicks, verdictUnverified, "query failed: %v", o.err)
	case want == 0:
		return newCheck(nameTicks, verdictUnverified, "an empty window (%s): nothing to check", span)
	case o.ticks == 0:
		return newCheck(nameTicks, verdictUnverified, "0 ticks observed of %d from %s: nothing to check", want, span)
	}
	v := verdictOK
	if o.ticks != want {
		v = verdictViolated
	}
	return newCheck(nameTicks, v, "%d ticks of %d from %s (%d recorded as missed), %d missing", o.ticks, want, span, o.skipped, want-o.ticks)
}

// exposureKind is something the harness did to a worker process.
type exposureKind int

const (
	exposedKill         exposureKind = iota // kill -9
	exposedSessions                         // pg_terminate_backend of every ferry backend, its liveness session among them
	exposedRestart                          // a Postgres restart
	exposedLockConn                         // pg_terminate_backend of its election lock session only
	exposedSIGSTOP                          // SIGSTOP, and SIGCONT within the liveness lease
	exposedSIGTERM                          // a graceful stop
	exposedPartition                        // its network to Postgres blackholed past its lease, then healed
	exposedFailover                         // the primary crashed and its standby promoted
	exposedLivenessKill                     // pg_terminate_backend of its liveness session alone, again and again
	exposedPause                            // SIGSTOP past its liveness lease, then SIGCONT
)

func (k exposureKind) String() string {
	return [...]string{"kill -9", "sessions terminated", "Postgres restart", "lock session terminated", "SIGSTOP", "SIGTERM", "network partition", "primary failover", "liveness session terminated", "SIGSTOP past the lease"}[k]
}

// endsLiveness says whether k ends the worker's liveness session, so that
// the rescuer may rightly find it dead.
func (k exposureKind) endsLiveness() bool {
	return k == exposedKill || k == exposedSessions || k == exposedRestart || k == exposedPartition || k == exposedFailover || k == exposedPause
}

// exposure is one thing the harness did to a process, and when.
type exposure struct {
	kind exposureKind
	at   time.Time
}

// deadWindow bounds how long after the end of its liveness session a
// worker may be declared dead and still be explained by it: a failover, a
// database restart and a rescue pass take seconds, not this long.
const deadWindow = 30 * time.Second

// cause returns the exposure among exps that explains a worker declared
// dead at t: one that ended its liveness session at most deadWindow
// before t.
func cause(exps []exposure, t time.Time) (exposure, bool) {
	for _, e := range slices.Backward(exps) {
		if e.kind.endsLiveness() && !e.at.After(t) && t.Sub(e.at) <= deadWindow {
			return e, true
		}
	}
	return exposure{}, false
}

// workerRow is one row of ferry_worker.
type workerRow struct {
	pid               int
	clientID          string
	stoppedAt, deadAt *time.Time
	rescued           int
}

// diedRunning says whether the rescuer declared the worker dead while it
// ran, rather than after it stopped gracefully (it declares a stopped
// worker dead too, at its next pass).
func (r workerRow) diedRunning() bool {
	return r.deadAt != nil && (r.stoppedAt == nil || r.deadAt.Before(*r.stoppedAt))
}

func observeWorkers(ctx context.Context, pool *pgxpool.Pool) ([]workerRow, error) {
	rows, err := pool.Query(ctx, "SELECT pid, client_id, stopped_at, dead_at, rescued_jobs FROM ferry_worker ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("read ferry_worker: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (workerRow, error) {
		var r workerRow
		return r, row.Scan(&r.pid, &r.clientID, &r.stoppedAt, &r.deadAt, &r.rescued)
	})
	if err != nil {
		return nil, fmt.Errorf("read ferry_worker: %w", err)
	}
	return out, nil
}

// deathObs is every worker the database recorded and everything the
// harness did to each process, by pid.
type deathObs struct {
	rows      []workerRow
	exposures map[int][]exposure
	err       error
}

// checkDeaths: no job was rescued from a live worker. Every worker the
// rescuer declared dead while it ran was a process whose liveness session
// the harness had just ended (kill -9, pg_terminate_backend of its
// sessions, a Postgres restart, a partition or a SIGSTOP past its lease);
// never one that was only stopped gracefully, SIGSTOPped within its lease,
// had its election lock session or its liveness session alone
// terminated, or was left alone. And every process killed with kill -9 was declared dead: the
// rescuer saw it.
func checkDeaths(o deathObs) check {
	if o.err != nil {
		return newCheck(nameDead, verdictUnverified, "query failed: %v", o.err)
	}
	if len(o.rows) == 0 {
		return newCheck(nameDead, verdictUnverified, "0 workers recorded in ferry_worker: nothing to check")
	}
	byPID := map[int]workerRow{}
	for _, r := range o.rows {
		byPID[r.pid] = r
	}
	var killed, unseen, undeclared []int
	for pid, exps := range o.exposures {
		for _, e := range exps {
			if e.kind != exposedKill {
				continue
			}
			killed = append(killed, pid)
			switch r, ok := byPID[pid]; {
			case !ok:
				unseen = append(unseen, pid)
			case r.deadAt == nil:
				undeclared = append(undeclared, pid)
			}
		}
	}
	byCause := map[exposureKind]int{}
	var rescued, graceful, gracefulRescued int
	var live []string
	for _, r := range o.rows {
		switch {
		case r.diedRunning():
			e, ok := cause(o.exposures[r.pid], *r.deadAt)
			if !ok {
				live = append(live, fmt.Sprintf("pid %d (%s) at %s after %s", r.pid, r.clientID, r.deadAt.UTC().Format("15:04:05.000"), describe(o.exposures[r.pid])))
				continue
			}
			byCause[e.kind]++
			rescued += r.rescued
		case r.deadAt != nil:
			graceful++
			gracefulRescued += r.rescued
		}
	}
	switch {
	case len(killed) == 0:
		return newCheck(nameDead, verdictUnverified, "no process was killed: nothing shows the rescuer finding a dead worker")
	case len(unseen) > 0:
		return newCheck(nameDead, verdictUnverified, "killed pids %v have no ferry_worker row", unseen)
	}
	var explained int
	for _, n := range byCause {
		explained += n
	}
	result := fmt.Sprintf("%d declared dead while running (%d killed, %d sessions terminated, %d Postgres restart, %d network partition, %d SIGSTOP past the lease, %d primary failover; %d jobs rescued), %d after a graceful stop (%d jobs left behind)",
		explained, byCause[exposedKill], byCause[exposedSessions], byCause[exposedRestart], byCause[exposedPartition], byCause[exposedPause], byCause[exposedFailover], rescued, graceful, gracefulRescued)
	switch {
	case len(live) > 0:
		return newCheck(nameDead, verdictViolated, "%s; declared dead with no session of theirs ended: %s", result, strings.Join(live, "; "))
	case len(undeclared) > 0:
		return newCheck(nameDead, verdictViolated, "%s; killed but never declared dead: pids %v", result, undeclared)
	}
	return newCheck(nameDead, verdictOK, "%s; 0 with no session ended", result)
}

// describe lists what the harness did to a process, "nothing" if nothing.
func describe(exps []exposure) string {
	if len(exps) == 0 {
		return "nothing the harness did"
	}
	var parts []string
	for _, e := range exps {
		parts = append(parts, fmt.Sprintf("%s at %s", e.kind, e.at.UTC().Format("15:04:05.000")))
	}
	return strings.Join(parts, ", ")
}

// sparedObs is a fault a live worker must come through whole: which worker
// the harness did it to and when, what it was running then, its
// ferry_worker row at the end, the jobs whose errors say they were
// rescued from it before until (its next exposure that ended its liveness
// session, if any), and its exit before until that the harness did not
// cause, if it exited.
type sparedObs struct {
	pid           int
	clientID      string
	at            time.Time
	running, long int
	row           *workerRow
	until         time.Time
	rescued       int64
	exit          *workerExit
	// evidence is, when it was declared dead or exited, what the logs say
	// of it after the fault (lostEvidence).
	evidence string
	err      error
}

// stallObs is the SIGSTOP fault: the worker stopped for less than its
// lease, and for how long.
type stallObs struct {
	sparedObs
	stopped, lease time.Duration
}

func observeSpared(ctx context.Context, pool *pgxpool.Pool, o sparedObs, exps []exposure, rows []workerRow, exits []workerExit) sparedObs {
	if o.pid == 0 {
		return o
	}
	for _, e := range exps {
		if e.kind.endsLiveness() && e.at.After(o.at) {
			o.until = e.at
			break
		}
	}
	for _, r := range rows {
		if r.pid == o.pid {
			o.row = &r
		}
	}
	for _, x := range exits {
		if x.pid == o.pid && x.by == nil && (o.until.IsZero() || x.at.Before(o.until)) {
			o.exit = &x
		}
	}
	var until *time.Time
	if !o.until.IsZero() {
		until = &o.until
	}
	err := pool.QueryRow(ctx, `SELECT count(DISTINCT j.id) FROM river_job j, unnest(j.errors) e
		WHERE strpos(e->>'error', $1) > 0 AND ($2::timestamptz IS NULL OR (e->>'at')::timestamptz < $2)`, o.clientID, until).Scan(&o.rescued)
	if err != nil {
		o.err = fmt.Errorf("count jobs rescued from pid %d: %w", o.pid, err)
	}
	return o
}

// judge is the verdict on a worker that a fault must spare, once the
// fault's own conditions hold (result says what it did): it is not
// declared dead, has no job rescued from it and does not exit (until a
// later fault ends its session). Without its ferry_worker row it is
// unverified.
func (o sparedObs) judge(name, result string) check {
	if o.row == nil {
		return newCheck(name, verdictUnverified, "pid %d has no ferry_worker row", o.pid)
	}
	dead := o.row.deadAt != nil && o.row.diedRunning() && (o.until.IsZero() || o.row.deadAt.Before(o.until))
	switch {
	case dead || o.rescued > 0:
		return newCheck(name, verdictViolated, "%s: declared dead %t, %d jobs rescued from it (logs: %s)", result, dead, o.rescued, o.evidence)
	case o.exit != nil:
		return newCheck(name, verdictViolated, "%s: exited with code %d at %s (last error: %q; logs: %s)", result, o.exit.code, o.exit.at.UTC().Format("15:04:05.000"), o.exit.why, o.evidence)
	}
	return newCheck(name, verdictOK, "%s: not declared dead, 0 jobs rescued from it, still up", result)
}

// checkStall: a worker stopped (SIGSTOP) for less than its liveness lease,
// while running long jobs, is not declared dead, has no job rescued from
// it and does not exit (until a later fault ends its session).
func checkStall(o stallObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameStall, verdictUnverified, "query failed: %v", o.err)
	case o.pid == 0:
		return newCheck(nameStall, verdictUnverified, "no worker was stopped: nothing to check")
	case o.long == 0:
		return newCheck(nameStall, verdictUnverified, "pid %d had no long job running when stopped: nothing to rescue", o.pid)
	case o.stopped >= o.lease:
		return newCheck(nameStall, verdictUnverified, "pid %d was stopped %s, not under its lease of %s", o.pid, o.stopped.Round(time.Millisecond), o.lease)
	}
	return o.judge(nameStall, fmt.Sprintf("pid %d stopped %s (lease %s) running %d jobs, %d of them long", o.pid, o.stopped.Round(time.Millisecond), o.lease.Round(time.Millisecond), o.running, o.long))
}

// workerExit is one worker process's end, as the harness saw it.
type workerExit struct {
	pid  int
	code int
	at   time.Time
	// by is what the harness did to end it (SIGTERM or kill -9), if it did.
	by *exposureKind
	// declaredDead: it logged "liveness: declared dead; stopping".
	declaredDead bool
	// why is its last error record, "" if none.
	why string
}

// exitObs is every worker exit and everything the harness did to each
// process, by pid.
type exitObs struct {
	exits     []workerExit
	exposures map[int][]exposure
}

// checkExits: a worker exits only when the harness stopped it (SIGTERM,
// exit code 0) or killed it, or when it stopped itself because it was
// declared dead after the harness ended its liveness session (then the
// harness restarted it). Any other exit, such as a worker that stopped
// itself after a SIGSTOP, violates it.
func checkExits(o exitObs) check {
	if len(o.exits) == 0 {
		return newCheck(nameExits, verdictUnverified, "0 exits seen: nothing to check")
	}
	var killed, stopped, dead int
	var bad []string
	for _, x := range o.exits {
		explained := false
		if x.declaredDead {
			for _, e := range o.exposures[x.pid] {
				if e.kind.endsLiveness() && !e.at.After(x.at) {
					explained = true
				}
			}
		}
		switch {
		case x.by != nil && *x.by == exposedKill:
			killed++
		case explained:
			dead++
		case x.by != nil && *x.by == exposedSIGTERM && x.code == 0:
			stopped++
		default:
			how := "on its own"
			if x.by != nil {
				how = "after " + x.by.String()
			}
			bad = append(bad, fmt.Sprintf("pid %d exited %s with code %d (declared dead: %t; before: %s; last error: %q)", x.pid, how, x.code, x.declaredDead, describe(o.exposures[x.pid]), x.why))
		}
	}
	result := fmt.Sprintf("%d exits: %d killed, %d stopped with SIGTERM (code 0), %d stopped themselves declared dead after their sessions ended (restarted)", len(o.exits), killed, stopped, dead)
	if len(bad) > 0 {
		return newCheck(nameExits, verdictViolated, "%s; unexpected: %s", result, strings.Join(bad, "; "))
	}
	return newCheck(nameExits, verdictOK, "%s, 0 unexpected", result)
}

// attributeDeaths counts, for each fault, the workers declared dead while
// running (and the jobs rescued from them) from the fault until the next
// one.
func attributeDeaths(faults []faultResult, rows []workerRow) {
	for i := range faults {
		faults[i].dead, faults[i].rescued = 0, 0
		for _, r := range rows {
			if !r.diedRunning() || r.deadAt.Before(faults[i].at) || (i+1 < len(faults) && !r.deadAt.Before(faults[i+1].at)) {
				continue
			}
			faults[i].dead++
			faults[i].rescued += r.rescued
		}
	}
}

// report prints the faults and the checks as tables, then the N passed, N
// failed line CI looks for, and says whether every check passed.
func report(w io.Writer, faults []faultResult, checks []check) bool {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nfault\tfailover gap\tworkers declared dead (jobs rescued)")
	for _, f := range faults {
		g := f.gap.Round(time.Millisecond).String()
		switch {
		case f.skipped != "":
			g = "skipped: " + f.skipped
		case f.note != "" && f.gap > 0:
			g += "; " + f.note
		case f.note != "":
			g = f.note
		}
		fmt.Fprintf(tw, "%s\t%s\t%d (%d)\n", f.name, g, f.dead, f.rescued)
	}
	fmt.Fprintln(tw, "\ncheck\tresult\tverdict")
	failed := 0
	for _, c := range checks {
		if !c.ok() {
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", c.name, c.result, c.verdict)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "chaos: %d passed, %d failed\n", len(checks)-failed, failed)
	return failed == 0 && len(checks) > 0
}
