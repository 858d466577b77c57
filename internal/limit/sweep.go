package limit

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry/internal/base/loop"
)

// seenEvery is how often a worker marks its limits seen in ferry_limit;
// goneAfter is how long after the last mark a limit counts as removed
// from every worker's config: no job parks behind it (the park reads the
// same ten minutes, migration 032) and the jobs parked behind it are
// freed; past forgetAfter its row is deleted.
// How far back the sweep looks for gates a claim drained while a job was
// parking in them (the park's transaction committed after the claim
// looked): each pass at the gates drained in the last reactivateWithin
// (a park commits within milliseconds, mostly), once a minute at those of
// the last reactivateLate (a transaction that stayed open), once an hour
// at all of them. Each look costs a probe of the parked jobs' index per
// gate: with 10,000 keys draining, looking at all of them every second
// took a third of a second each time.
const (
	reactivateWithin = 3 * time.Second
	reactivateLate   = 15 * time.Minute
)

const (
	seenEvery   = time.Minute
	goneAfter   = 10 * time.Minute
	forgetAfter = 24 * time.Hour
)

const (
	sqlRegister = `INSERT INTO ferry_limit AS l (name, kind, queue, key_field, concurrency, rate_count, rate_period, burst,
    fair, weights, default_weight, seen_at)
SELECT *, now() FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[], $7::interval[], $8::int[],
    $10::boolean[], $11::jsonb[], $12::float8[])
ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, queue = excluded.queue, key_field = excluded.key_field,
    concurrency = excluded.concurrency, rate_count = excluded.rate_count, rate_period = excluded.rate_period,
    burst = excluded.burst, fair = excluded.fair, weights = excluded.weights,
    default_weight = excluded.default_weight, seen_at = now(),
    registered_at = CASE WHEN l.seen_at < now() - make_interval(secs => $9) THEN now() ELSE l.registered_at END`

	// sqlParkWaiting parks the jobs left available under the limits named
	// $2 (a worker's, as it starts) or, when $2 is NULL, under those
	// registered in the last minute (the sweep's): jobs that became
	// available before a worker registered the limit. Made available
	// again, the park takes them. At most 10,000 a pass of each limit. The
	// outer state test is what Postgres checks again on a row changed
	// since the subquery read it: a job a worker claimed meanwhile
	// (running) is left alone, not parked from under its worker. The
	// sweep's other updates test their state the same way.
	sqlParkWaiting = `UPDATE river_job SET state = 'available'
WHERE state = 'available' AND id IN (
    SELECT j.id FROM ferry_limit l
    CROSS JOIN LATERAL (
        SELECT j.id FROM river_job j
        WHERE j.state = 'available' AND (j.kind = l.kind OR j.queue = l.queue)
        LIMIT 10000) j
    WHERE l.seen_at > now() - make_interval(secs => $1)
      AND CASE WHEN $2::text[] IS NULL THEN l.registered_at > now() - interval '1 minute'
               ELSE l.name = ANY($2::text[]) END)`

	// sqlGoneGates lists the gates with a limit that no worker enforces
	// any more (marked seen more than $1 seconds ago).
	// (From the gates' parts' rows: reading each gate's parts from its
	// jsonb took 40 ms a pass with 10,000 gates.)
	sqlGoneGates = `SELECT DISTINCT gp.gate_id FROM ferry_limit_gate_part gp
WHERE NOT EXISTS (SELECT 1 FROM ferry_limit l WHERE l.name = gp.limit_name AND l.seen_at > now() - make_interval(secs => $1))`

	// sqlFreeGone makes available again up to 10,000 of the jobs parked
	// behind the gates $1: the park puts them behind the limits left, if
	// any.
	sqlFreeGone = `UPDATE river_job SET state = 'available', metadata = metadata - ARRAY['ferry_gate', 'ferry_slot']
WHERE state = 'pending' AND metadata ? 'ferry_gate' AND id IN (SELECT j.id FROM river_job j
    WHERE j.state = 'pending' AND j.metadata ? 'ferry_gate' AND (j.metadata->>'ferry_gate')::bigint = ANY($1::bigint[])
    LIMIT 10000)`

	// sqlReactivate marks active the gates with jobs parked that a claim
	// marked drained while their park was not yet committed (of those
	// drained in the last $1 seconds, or of all when $1 is NULL), and
	// returns their queues.
	// (A probe of the parked jobs' index per gate, LATERAL: as an EXISTS,
	// Postgres hashed every parked job's gate, 0.3 s a pass with 500,000
	// parked.)
	sqlReactivate = `WITH drained AS MATERIALIZED (
    SELECT g.id FROM ferry_limit_gate g
    WHERE NOT g.active AND ($1::float8 IS NULL OR g.drained_at > now() - make_interval(secs => $1))
)
UPDATE ferry_limit_gate g SET active = true
FROM drained d CROSS JOIN LATERAL (
    SELECT 1 FROM river_job j WHERE j.state = 'pending' AND j.metadata ? 'ferry_gate'
      AND (j.metadata->>'ferry_gate')::bigint = d.id
    LIMIT 1) parked
WHERE g.id = d.id AND NOT g.active
RETURNING g.queue`

	// sqlDropGates forgets the gates idle for a day (no job parked behind
	// them nor running through them); a job of one that comes back parks
	// behind a new one.
	sqlDropGates = `WITH gone AS (DELETE FROM ferry_limit_gate g
WHERE NOT g.active AND g.created_at < now() - interval '1 day'
  AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.state = 'pending' AND j.metadata ? 'ferry_gate'
    AND (j.metadata->>'ferry_gate')::bigint = g.id)
  AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.state = 'running' AND j.metadata ? 'ferry_gate'
    AND (j.metadata->>'ferry_gate')::bigint = g.id)
RETURNING g.id)
DELETE FROM ferry_limit_gate_started s USING gone WHERE s.gate_id = gone.id`

	// sqlDropFullBuckets forgets the rate rows that say nothing: a bucket
	// whose tat has passed is full, as if it had no row.
	sqlDropFullBuckets = `DELETE FROM ferry_limit_rate WHERE tat < now()`

	sqlForget = `DELETE FROM ferry_limit WHERE seen_at < now() - make_interval(secs => $1)`

	// ferry_limit_on says whether some worker enforces a limit (migration
	// 032): a registration turns it on, the sweep off once no limit was
	// seen for goneAfter; both under one lock, so that the sweep's check
	// sees a registration that took it first.
	sqlLimitsOnLock = `SELECT pg_advisory_xact_lock(hashtextextended('ferry.limit on', 0))`
	sqlLimitsOn     = `SELECT setval('ferry_limit_on', 1, true)`
	sqlLimitsOff    = `SELECT setval('ferry_limit_on', 1, false) WHERE pg_sequence_last_value('ferry_limit_on') IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM ferry_limit WHERE seen_at > now() - make_interval(secs => $1))`
)

// Register writes the limits into ferry_limit (or marks them seen), where
// `enqueue limits` and the console read them and the sweep learns which
// limits some worker still enforces.
func (l *Limiter) Register(ctx context.Context) error {
	if len(l.limits) == 0 {
		return nil
	}
	n := len(l.limits)
	var (
		names, kinds, queues, fields = make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		conc, counts, bursts         = make([]*int32, n), make([]*int32, n), make([]*int32, n)
		periods                      = make([]*time.Duration, n)
		fair                         = make([]bool, n)
		weights                      = make([]map[string]float64, n)
		defaults                     = make([]*float64, n)
	)
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	optInt := func(i int) *int32 {
		if i == 0 {
			return nil
		}
		v := int32(i)
		return &v
	}
	for i, lim := range l.limits {
		names[i], kinds[i], queues[i], fields[i] = lim.Name, opt(lim.Kind), opt(lim.Queue), opt(lim.KeyField)
		conc[i], counts[i], bursts[i] = optInt(lim.Concurrency), optInt(lim.Rate.Count), optInt(lim.Rate.Burst)
		if !lim.Rate.IsZero() {
			p := lim.Rate.Period
			periods[i] = &p
		}
		if lim.Fair != nil {
			fair[i], weights[i] = true, lim.Fair.Weights
			if weights[i] == nil {
				weights[i] = map[string]float64{}
			}
			d := lim.Fair.Default()
			defaults[i] = &d
		}
	}
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLimitsOnLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlRegister, names, kinds, queues, fields, conc, counts, periods, bursts, goneAfter.Seconds(),
			fair, weights, defaults); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlLimitsOn)
		return err
	})
	if err != nil {
		return fmt.Errorf("limits: register: %w", err)
	}
	return nil
}

// Start registers the limits and parks the jobs already available under
// them (inserted while no worker had registered them: the first start,
// or after every worker was down ten minutes), before River fetches: a
// job available under a limit would be fetched past it.
func (l *Limiter) Start(ctx context.Context) error {
	if len(l.limits) == 0 {
		return nil
	}
	if err := l.Register(ctx); err != nil {
		return err
	}
	names := make([]string, len(l.limits))
	for i, lim := range l.limits {
		names[i] = lim.Name
	}
	var parked int64
	for {
		tag, err := l.pool.Exec(ctx, sqlParkWaiting, goneAfter.Seconds(), names)
		if err != nil {
			return fmt.Errorf("limits: park the jobs waiting under them: %w", err)
		}
		parked += tag.RowsAffected()
		if tag.RowsAffected() == 0 {
			break
		}
	}
	if parked > 0 {
		l.logger.Info("limits: parked the jobs waiting under them", "jobs", parked)
	}
	return nil
}

// Run, on every worker until ctx ends, marks this worker's limits seen
// every minute and adds the jobs it started from each fair queue's gates
// to their counts every startedFlush.
func (l *Limiter) Run(ctx context.Context) error {
	if len(l.limits) == 0 {
		return nil
	}
	seen := time.Now()
	return loop.Every(ctx, startedFlush, func(ctx context.Context) error {
		for _, fq := range l.fair {
			if err := fq.flush(ctx, l.pool); err != nil && ctx.Err() == nil {
				l.logger.Warn("limits: cannot count a fair queue's starts; counting on", "error", err)
			}
		}
		if time.Since(seen) < seenEvery {
			return nil
		}
		seen = time.Now()
		if err := l.Register(ctx); err != nil && ctx.Err() == nil {
			l.logger.Warn("limits: cannot mark this worker's limits seen; retrying at the next interval", "error", err)
		}
		return nil
	})
}

// Sweeper returns the leader's runnable: a Sweep now and every
// SweepInterval (a failed pass ends it, and the elector runs it again
// after a backoff).
func (l *Limiter) Sweeper() func(context.Context) error {
	return func(ctx context.Context) error { return loop.Every(ctx, l.sweep, l.Sweep) }
}

// Sweep is one pass of what no claim does: it parks the jobs that became
// available under a limit before a worker registered it, frees the jobs
// parked behind limits that no worker enforces any more, marks active the
// gates a claim marked drained while a job was parking in them (and wakes
// their queues), and forgets old gates, full rate buckets and old limits.
func (l *Limiter) Sweep(ctx context.Context) error {
	gone := goneAfter.Seconds()
	rows, err := l.pool.Query(ctx, sqlGoneGates, gone)
	if err != nil {
		return fmt.Errorf("list the gates of gone limits: %w", err)
	}
	goneGates, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("list the gates of gone limits: %w", err)
	}
	if len(goneGates) > 0 {
		if _, err := l.pool.Exec(ctx, sqlFreeGone, goneGates); err != nil {
			return fmt.Errorf("free the jobs of gone limits: %w", err)
		}
	}
	for _, step := range []struct {
		what string
		sql  string
		args []any
	}{
		{"park the jobs of new limits", sqlParkWaiting, []any{gone, nil}},
		{"forget idle gates", sqlDropGates, nil},
		{"drop full buckets", sqlDropFullBuckets, nil},
		{"forget old limits", sqlForget, []any{forgetAfter.Seconds()}},
	} {
		if _, err := l.pool.Exec(ctx, step.sql, step.args...); err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
	}
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLimitsOnLock); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, sqlLimitsOff, gone)
		return err
	})
	if err != nil {
		return fmt.Errorf("turn the park off: %w", err)
	}
	// The gates drained in the last seconds every pass, those of the
	// last minutes every minute, all of them every hour.
	s := reactivateWithin.Seconds()
	within := &s
	switch {
	case time.Since(l.reactivatedAll) >= time.Hour:
		l.reactivatedAll, l.reactivatedLate, within = time.Now(), time.Now(), nil
	case time.Since(l.reactivatedLate) >= time.Minute:
		l.reactivatedLate, s = time.Now(), reactivateLate.Seconds()
	}
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlReactivate, within)
		if err != nil {
			return fmt.Errorf("mark gates active: %w", err)
		}
		queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("mark gates active: %w", err)
		}
		return l.notify(ctx, tx, queues)
	})
}

// notify sends River's insert notification for each queue in tx, so that
// the workers of a queue whose gate was marked active claim now rather
// than at their next poll.
func (l *Limiter) notify(ctx context.Context, tx pgx.Tx, queues []string) error {
	slices.Sort(queues)
	queues = slices.Compact(queues)
	if len(queues) == 0 {
		return nil
	}
	payloads := make([]string, len(queues))
	for i, q := range queues {
		payloads[i] = fmt.Sprintf(`{"queue": %q}`, q)
	}
	err := riverpgxv5.New(nil).UnwrapExecutor(tx).NotifyMany(ctx, &riverdriver.NotifyManyParams{
		Payload: payloads, Schema: l.schema, Topic: "river_insert",
	})
	if err != nil {
		return fmt.Errorf("notify the queues of woken gates: %w", err)
	}
	return nil
}
