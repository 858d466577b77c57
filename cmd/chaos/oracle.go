package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

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
	CREATE TABLE chaos_effect (key text PRIMARY KEY, job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
	CREATE TABLE chaos_received (event_id text PRIMARY KEY, arrivals int NOT NULL DEFAULT 1);
	CREATE TABLE chaos_leader_run (id bigserial PRIMARY KEY, pid int NOT NULL, term bigint NOT NULL,
		started_at timestamptz NOT NULL, stopped_at timestamptz);`

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
	nameHolders  = "holders of the lock, sampled every 100 ms"
	nameRuns     = "leader runs overlapping in time"
	nameJobs     = "job effects exactly once"
	nameOutbox   = "outbox effects exactly once"
	nameTicks    = "ticks in the window recorded exactly once"
	outageMargin = 2 * time.Second
	sampleEvery  = 100 * time.Millisecond
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
	rows, err := pool.Query(ctx, "SELECT pid, started_at, stopped_at FROM chaos_leader_run ORDER BY started_at, id")
	if err != nil {
		o.err = fmt.Errorf("read chaos_leader_run: %w", err)
		return o
	}
	defer rows.Close()
	for rows.Next() {
		var r leaderRun
		if err := rows.Scan(&r.pid, &r.start, &r.stopped); err != nil {
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

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// jobObs counts, in one snapshot, the chaos.effect jobs that committed
// (distinct keys), the effects, and the committed jobs without an effect;
// acknowledged is how many inserts the producer saw commit.
type jobObs struct {
	committed, acknowledged, effects, missing int64
	err                                       error
}

func observeJobs(ctx context.Context, pool *pgxpool.Pool, acknowledged int64) jobObs {
	o := jobObs{acknowledged: acknowledged}
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(DISTINCT args->>'key') FROM river_job WHERE kind = 'chaos.effect'),
		(SELECT count(*) FROM chaos_effect),
		(SELECT count(DISTINCT j.args->>'key') FROM river_job j WHERE j.kind = 'chaos.effect'
			AND NOT EXISTS (SELECT 1 FROM chaos_effect e WHERE e.key = j.args->>'key'))`).Scan(&o.committed, &o.effects, &o.missing)
	if err != nil {
		o.err = fmt.Errorf("count jobs and effects: %w", err)
	}
	return o
}

// checkJobs: every committed job has its effect, once (chaos_effect's
// primary key makes two impossible), and none the producer saw commit is
// missing. The truth is what committed: a producer whose statement
// committed just as its context ended never counted it.
func checkJobs(o jobObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameJobs, verdictUnverified, "query failed: %v", o.err)
	case o.committed == 0:
		return newCheck(nameJobs, verdictUnverified, "0 jobs committed (%d acknowledged): nothing to check", o.acknowledged)
	}
	v := verdictOK
	if o.effects != o.committed || o.missing != 0 || o.committed < o.acknowledged {
		v = verdictViolated
	}
	return newCheck(nameJobs, v, "%d jobs committed (%d acknowledged to the producer), %d effects, %d missing (UNIQUE key: never two)",
		o.committed, o.acknowledged, o.effects, o.missing)
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

// standIns counts what the suite did in place of machinery that a real
// deployment has and the suite's time scale does not allow.
type standIns struct {
	// rescued is the running jobs of killed workers put back to available:
	// a stand-in for the rescuer until ferry's liveness rescue lands.
	rescued int64
	// broughtForward is the retries whose backoff was cut short.
	broughtForward int64
}

// report prints the faults, the stand-ins and the checks as one table, then
// the N passed, N failed line CI looks for, and says whether every check
// passed.
func report(w io.Writer, faults []faultResult, si standIns, checks []check) bool {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nfault\tfailover gap")
	for _, f := range faults {
		g := f.gap.Round(time.Millisecond).String()
		if f.skipped != "" {
			g = "skipped: " + f.skipped
		}
		fmt.Fprintf(tw, "%s\t%s\n", f.name, g)
	}
	fmt.Fprintln(tw, "\nstand-in\twhat the suite did")
	fmt.Fprintf(tw, "for the rescuer (until ferry's liveness rescue lands)\t%d running jobs of killed workers put back with an UPDATE\n", si.rescued)
	fmt.Fprintf(tw, "for the retry backoff\t%d retries brought forward with an UPDATE\n", si.broughtForward)
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
