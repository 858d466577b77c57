package limit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/pilot"
)

// part is one limit of a gate with the gate's key of it.
type part struct {
	name, key string
}

// lockName names the part's advisory lock (a space never occurs in a
// limit's name, so no two parts share one).
func (p part) lockName() string { return "ferry.limit " + p.name + " " + p.key }

// gate is a gate of ferry_limit_gate as a claim reads it.
type gate struct {
	id    int64
	parts []part
}

var (
	// sqlActiveGates lists the gates of a queue that may have jobs parked.
	sqlActiveGates = `SELECT id, parts FROM ferry_limit_gate WHERE queue = $1 AND active`

	// sqlTryLock takes, of the parts' locks ($1, names sorted), those no
	// other claim holds, and returns them; a part locked elsewhere is being
	// claimed from by another worker, which leaves it as it found it.
	sqlTryLock = `SELECT n FROM unnest($1::text[]) AS n WHERE pg_try_advisory_xact_lock(hashtextextended(n, 0))`

	// sqlPartState reads, once the locks are held (a statement of its own,
	// so that it sees every claim committed before them), the clock, and
	// for each part ($1 names, $2 keys) its running jobs over every gate it
	// is part of, when $3 says it has a concurrency (they are counted at
	// each claim, so only where they matter), and its rate's tat.
	sqlPartState = `SELECT p.name, p.key, clock_timestamp(),
    CASE WHEN p.counted THEN (SELECT count(*) FROM ferry_limit_gate_part gp
        JOIN river_job j ON (j.metadata->>'ferry_gate')::bigint = gp.gate_id
            AND j.state = 'running' AND j.metadata ? 'ferry_gate'
        WHERE gp.limit_name = p.name AND gp.key = p.key) ELSE 0 END,
    (SELECT r.tat FROM ferry_limit_rate r WHERE r.limit_name = p.name AND r.key = p.key)
FROM unnest($1::text[], $2::text[], $3::boolean[]) AS p(name, key, counted)`

	// sqlClaim claims up to $2[i] parked jobs of gate $1[i] (of kinds $3,
	// or any when NULL) that are due (a job snoozed briefly is available
	// later, and parks at once), in River's fetch order, as River's fetch claims
	// ($4 the client, $5 how many clients attempted_by keeps), and returns
	// them (as River's driver reads them, and each one's gate's place) in
	// the gates' order, then River's.
	sqlClaim = `WITH want AS (
    SELECT * FROM unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS w(gate, n, ord)
),
locked AS (
    SELECT c.id, w.ord, c.priority, c.scheduled_at
    FROM want w
    CROSS JOIN LATERAL (
        SELECT j.id, j.priority, j.scheduled_at FROM river_job j
        WHERE j.state = 'pending' AND j.metadata ? 'ferry_gate'
          AND (j.metadata->>'ferry_gate')::bigint = w.gate
          AND j.scheduled_at <= now()
          AND ($3::text[] IS NULL OR j.kind = ANY($3::text[]))
        ORDER BY j.priority, j.scheduled_at, j.id
        LIMIT w.n
        FOR UPDATE SKIP LOCKED
    ) c
),
claimed AS (
    UPDATE river_job
    SET ` + pilot.ClaimSet("now()", "$4", "$5") + `
    FROM locked
    WHERE river_job.id = locked.id
    RETURNING river_job.*, locked.ord
)
SELECT ` + jobColumns + `, ord FROM claimed ORDER BY ord, priority, scheduled_at, id`

	sqlSaveTat = `INSERT INTO ferry_limit_rate (limit_name, key, tat)
SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
ON CONFLICT (limit_name, key) DO UPDATE SET tat = excluded.tat`

	// sqlDrained marks inactive those of the gates ($1) that gave a claim
	// fewer jobs than it asked for that have no job parked now, and
	// returns the others (a job parked since the claim's snapshot, or one
	// not yet due): they stay active. A job parked meanwhile by a
	// transaction not yet committed finds its gate active, or the sweep
	// marks it so.
	sqlDrained = `WITH d AS (
    SELECT g.id, EXISTS (SELECT 1 FROM river_job j WHERE j.state = 'pending' AND j.metadata ? 'ferry_gate'
        AND (j.metadata->>'ferry_gate')::bigint = g.id) AS parked
    FROM ferry_limit_gate g WHERE g.id = ANY($1::bigint[])
), marked AS (
    UPDATE ferry_limit_gate g SET active = false, drained_at = now()
    FROM d WHERE g.id = d.id AND NOT d.parked AND g.active
)
SELECT id FROM d WHERE parked`
)

// applies reports whether some limit of l may apply to jobs of queue: a
// limit of the queue's, or of any kind.
func (l *Limiter) applies(queue string) bool {
	return len(l.byQueue[queue]) > 0 || len(l.byKind) > 0
}

// Claim is the pilot's claim before River's fetch (pilot.Claim): it takes
// the jobs parked behind this queue's gates that every limit of their
// gate lets start now (or, for a rate, within the lead), as many as the
// fetch asks for, in one transaction. A job claimed ahead of its rate turn
// waits for it in the Middleware. In a fair queue the gates are served by
// their keys' weights (fairQueue).
//
// Its round trips: the queue's active gates (and no more when none has
// jobs parked); BEGIN, the locks and the limits' use, pipelined (each
// statement of a transaction reads a snapshot of its own, taken once the
// one before it ended, so the use read sees every claim committed before
// the locks; none of the three when no gate has a concurrency or a rate);
// the claim, which returns the claimed rows as River's driver reads them;
// the rate state, the gates found drained and COMMIT, pipelined.
func (l *Limiter) Claim(ctx context.Context, _ riverdriver.Executor, params *riverdriver.JobGetAvailableParams) ([]*rivertype.JobRow, error) {
	if !l.applies(params.Queue) {
		return nil, nil
	}
	var (
		gates   []gate
		strides []stride
		taken   []*fairGate
		err     error
	)
	fq := l.fair[params.Queue]
	if fq != nil {
		fq.mu.Lock()
		defer fq.mu.Unlock()
		if err := fq.refresh(ctx, l.pool, l.enforces); err != nil {
			return nil, fmt.Errorf("limits: claim parked jobs of queue %q: %w", params.Queue, err)
		}
		taken = fq.take(params.MaxToLock)
		for _, g := range taken {
			gates, strides = append(gates, g.gate), append(strides, stride{g.weight, g.pass})
		}
	} else if gates, err = l.activeGates(ctx, params.Queue); err != nil {
		return nil, fmt.Errorf("limits: claim parked jobs of queue %q: %w", params.Queue, err)
	}
	if len(gates) == 0 {
		return nil, nil
	}
	var outcomes []gateOutcome
	if fq != nil {
		defer func() { fq.settle(taken, outcomes) }()
	}
	conn, err := l.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("limits: claim parked jobs of queue %q: %w", params.Queue, err)
	}
	// A connection released inside a transaction (a failed claim whose
	// ROLLBACK failed too) is closed by the pool, not reused.
	defer conn.Release()
	c, err := l.claim(ctx, conn.Conn(), gates, strides, params)
	if err != nil {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "ROLLBACK")
		return nil, fmt.Errorf("limits: claim parked jobs of queue %q: %w", params.Queue, err)
	}
	outcomes = c.outcomes
	if len(c.rows) == 0 {
		return nil, nil
	}
	for i, row := range c.rows {
		if !c.turns[i].IsZero() {
			l.turns.Store(row.ID, c.turns[i].Add(-c.offset))
		}
	}
	return c.rows, nil
}

// enforces reports whether this worker enforces every limit of g.
func (l *Limiter) enforces(g gate) bool {
	return !slices.ContainsFunc(g.parts, func(p part) bool { return l.byName[p.name] == nil })
}

// activeGates reads the queue's active gates, less those with a limit
// this worker does not enforce (left to the workers that do; the sweep
// frees them once no worker does).
func (l *Limiter) activeGates(ctx context.Context, queue string) ([]gate, error) {
	rows, err := l.pool.Query(ctx, sqlActiveGates, queue)
	if err != nil {
		return nil, fmt.Errorf("read gates: %w", err)
	}
	gates, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (gate, error) {
		var g gate
		var raw [][2]string
		if err := row.Scan(&g.id, &raw); err != nil {
			return g, err
		}
		for _, p := range raw {
			g.parts = append(g.parts, part{name: p[0], key: p[1]})
		}
		return g, nil
	})
	if err != nil {
		return nil, fmt.Errorf("read gates: %w", err)
	}
	return slices.DeleteFunc(gates, func(g gate) bool { return !l.enforces(g) }), nil
}

// claimResult is what a claim took: the jobs, each one's rate turn on the
// database's clock (zero: now), the database's clock minus this
// process's, and what it did with each gate it was given.
type claimResult struct {
	rows     []*rivertype.JobRow
	turns    []time.Time
	offset   time.Duration
	outcomes []gateOutcome
}

// claim is Claim's transaction on conn, which it begins and, when it
// returns no error, commits. strides, when not nil, are the gates' in a
// fair queue: the room is spent on the gates by stride, not in turn.
func (l *Limiter) claim(ctx context.Context, conn *pgx.Conn, gates []gate, strides []stride, params *riverdriver.JobGetAvailableParams) (claimResult, error) {
	res := claimResult{outcomes: make([]gateOutcome, len(gates))}
	// The parts with a room to lock and read: a fairness has none.
	byLock := map[string]part{}
	for _, g := range gates {
		for _, p := range g.parts {
			if l.byName[p.name].counted() {
				byLock[p.lockName()] = p
			}
		}
	}
	lockNames := slices.Sorted(maps.Keys(byLock))
	names, keys := make([]string, len(lockNames)), make([]string, len(lockNames))
	concurrent := make([]bool, len(lockNames)) // its running jobs are read
	for i, n := range lockNames {
		names[i], keys[i] = byLock[n].name, byLock[n].key
		concurrent[i] = l.byName[names[i]].Concurrency > 0
	}
	// Without a room to read, the claim needs no transaction: each job is
	// claimed once by SKIP LOCKED.
	tx := len(lockNames) > 0
	if !tx && strides != nil {
		return l.claimFair(ctx, conn, gates, strides, params)
	}
	now := time.Now()
	held := map[part]bool{}
	st := map[part]*partState{}
	if tx {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		b.Queue(sqlTryLock, lockNames)
		b.Queue(sqlPartState, names, keys, concurrent)
		before := time.Now()
		br := conn.SendBatch(ctx, b)
		var err error
		held, st, now, err = readLocksAndState(br, byLock)
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return res, err
		}
		// The clock was read somewhere between before and now: its middle.
		res.offset = now.Sub(before.Add(time.Since(before) / 2))
	}
	// The gates to plan for (their indexes in gates): those whose locks
	// this claim holds. A gate with a part locked elsewhere is left as it
	// is, for the claim that holds it.
	var idx []int
	for i, g := range gates {
		if !slices.ContainsFunc(g.parts, func(p part) bool { return l.byName[p.name].counted() && !held[p] }) {
			idx = append(idx, i)
		}
	}
	// Not fair: start at a random gate, so that the limits' room is shared
	// in turn, not always first to the same gates.
	if strides == nil && len(idx) > 1 {
		start := rand.IntN(len(idx)) //nolint:gosec // an order, not a secret
		idx = append(idx[start:], idx[:start]...)
	}
	planned := make([]gate, len(idx))
	var w []stride
	for j, i := range idx {
		planned[j] = gates[i]
		if strides != nil {
			w = append(w, strides[i])
		}
	}
	want, blocked := plan(planned, w, st, l.byName, now, l.lead, params.MaxToLock, nil)
	var ids []int64
	var ns []int32
	var asked []int // the index in planned of each gate asked of, in order
	for j, g := range planned {
		res.outcomes[idx[j]].blocked = blocked[j]
		if want[j] > 0 {
			ids, ns = append(ids, g.id), append(ns, int32(want[j])) //nolint:gosec // at most MaxToLock
			asked = append(asked, j)
		}
	}
	got, err := claimFrom(ctx, conn, ids, ns, params)
	if err != nil {
		return res, err
	}
	// The turns of the jobs claimed, as many as each gate gave; the gates
	// that gave fewer than asked may be drained.
	gotBy := make([]int, len(planned))
	for _, c := range got {
		gotBy[asked[c.ord-1]]++
	}
	var drained []int64
	for _, j := range asked {
		o := &res.outcomes[idx[j]]
		o.got = gotBy[j]
		if gotBy[j] < want[j] {
			drained = append(drained, planned[j].id)
			o.drained = true
		}
	}
	turnsBy := make([][]time.Time, len(planned))
	plan(planned, w, st, l.byName, now, l.lead, params.MaxToLock, func(j int, turn time.Time) {
		turnsBy[j] = append(turnsBy[j], turn)
	}, gotBy...)
	// The jobs come gate by gate, in the order asked.
	next := make([]int, len(planned))
	for _, c := range got {
		j := asked[c.ord-1]
		if next[j] >= len(turnsBy[j]) {
			return res, fmt.Errorf("claim: more jobs claimed from gate %d than turns planned", planned[j].id)
		}
		turn := turnsBy[j][next[j]]
		next[j]++
		if !turn.After(now) {
			turn = time.Time{}
		}
		res.rows, res.turns = append(res.rows, c.row), append(res.turns, turn)
	}
	end := &pgx.Batch{}
	if n, k, t := changedTats(st); len(n) > 0 {
		end.Queue(sqlSaveTat, n, k, t)
	}
	var still []int64 // the gates found short that still have jobs parked
	if len(drained) > 0 {
		end.Queue(sqlDrained, drained).Query(func(rows pgx.Rows) error {
			var err error
			still, err = pgx.CollectRows(rows, pgx.RowTo[int64])
			return err
		})
	}
	if tx {
		end.Queue("COMMIT")
	}
	if end.Len() > 0 {
		if err := conn.SendBatch(ctx, end).Close(); err != nil {
			return res, fmt.Errorf("save the limits' state and commit: %w", err)
		}
	}
	res.keep(gates, still)
	return res, nil
}

// keep clears the drained mark of the gates (of gates) found short that
// still have jobs parked (sqlDrained's): a worker keeps them in its fair
// queue, as they stay active.
func (r *claimResult) keep(gates []gate, still []int64) {
	for i := range r.outcomes {
		if r.outcomes[i].drained && slices.Contains(still, gates[i].id) {
			r.outcomes[i].drained = false
		}
	}
}

// claimFrom runs sqlClaim: up to ns[i] parked jobs of gate ids[i].
func claimFrom(ctx context.Context, conn *pgx.Conn, ids []int64, ns []int32, params *riverdriver.JobGetAvailableParams) ([]claimedJob, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := conn.Query(ctx, sqlClaim, ids, ns, params.Kind, params.ClientID,
		int32(min(params.MaxAttemptedBy, math.MaxInt32))) //nolint:gosec // bounded
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	got, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (claimedJob, error) {
		var c claimedJob
		var err error
		c.row, err = scanJobRow(row, &c.ord)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	return got, nil
}

// claimFair is claim for a fair queue's gates with no room to count (no
// limit but the fairness): no lock, no use read, no transaction. The
// stride's shares are asked of the gates; when some gate had fewer jobs
// parked than its share (a quiet key's one job), the room it left is
// asked again of the gates that gave all they were asked, by stride, in
// one more statement.
func (l *Limiter) claimFair(ctx context.Context, conn *pgx.Conn, gates []gate, strides []stride, params *riverdriver.JobGetAvailableParams) (claimResult, error) {
	res := claimResult{outcomes: make([]gateOutcome, len(gates))}
	passes := slices.Clone(strides)
	open := make([]int, len(gates)) // the indexes of the gates still asked of
	for i := range open {
		open[i] = i
	}
	var drained []int64
	left := params.MaxToLock
	for round := 0; round < 2 && left > 0 && len(open) > 0; round++ {
		sub, w := make([]gate, len(open)), make([]stride, len(open))
		for j, i := range open {
			sub[j], w[j] = gates[i], passes[i]
		}
		want, _ := plan(sub, w, nil, l.byName, time.Now(), 0, left, nil)
		var ids []int64
		var ns []int32
		var asked []int // the index in gates of each gate asked of
		for j, i := range open {
			if want[j] > 0 {
				ids, ns = append(ids, gates[i].id), append(ns, int32(want[j])) //nolint:gosec // at most MaxToLock
				asked = append(asked, i)
			}
		}
		got, err := claimFrom(ctx, conn, ids, ns, params)
		if err != nil {
			return res, err
		}
		gotBy := make([]int, len(gates))
		for _, c := range got {
			gotBy[asked[c.ord-1]]++
			res.rows, res.turns = append(res.rows, c.row), append(res.turns, time.Time{})
		}
		left -= len(got)
		short := false
		for k, i := range asked {
			o := &res.outcomes[i]
			o.got += gotBy[i]
			passes[i].pass += float64(gotBy[i]) / passes[i].weight
			if gotBy[i] < int(ns[k]) {
				o.drained, short = true, true
				drained = append(drained, gates[i].id)
			}
		}
		if !short {
			break
		}
		open = slices.DeleteFunc(open, func(i int) bool { return res.outcomes[i].drained })
	}
	if len(drained) > 0 {
		rows, err := conn.Query(ctx, sqlDrained, drained)
		if err != nil {
			return res, fmt.Errorf("mark drained gates: %w", err)
		}
		still, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return res, fmt.Errorf("mark drained gates: %w", err)
		}
		res.keep(gates, still)
	}
	return res, nil
}

// claimedJob is a job of sqlClaim: its row and its gate's place in the
// claim (1-based, among the gates asked of).
type claimedJob struct {
	row *rivertype.JobRow
	ord int64
}

// readLocksAndState reads the results of BEGIN, sqlTryLock and
// sqlPartState from br: the parts locked, every part's state, and the
// database's clock.
func readLocksAndState(br pgx.BatchResults, byLock map[string]part) (map[part]bool, map[part]*partState, time.Time, error) {
	if _, err := br.Exec(); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("begin: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("lock limits: %w", err)
	}
	locked, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("lock limits: %w", err)
	}
	held := map[part]bool{}
	for _, n := range locked {
		held[byLock[n]] = true
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("read limits' use: %w", err)
	}
	st := map[part]*partState{}
	var now time.Time
	for rows.Next() {
		var p part
		var s partState
		var tat *time.Time
		if err := rows.Scan(&p.name, &p.key, &now, &s.running, &tat); err != nil {
			rows.Close()
			return nil, nil, time.Time{}, fmt.Errorf("read limits' use: %w", err)
		}
		if tat != nil {
			s.tat = *tat
		}
		st[p] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, nil, time.Time{}, fmt.Errorf("read limits' use: %w", err)
	}
	if now.IsZero() {
		return nil, nil, time.Time{}, errors.New("read limits' use: no clock")
	}
	return held, st, now, nil
}

// partState is one part's room as a claim finds it and spends it.
type partState struct {
	running int
	tat     time.Time // zero: no rate row (a full bucket)
	changed bool      // tat moved: saved at the end of the claim
}

// plan spends the parts' room (st) on the gates, job by job: a gate's
// next job may start when each of its concurrency limits has a slot free
// and each of its rates has a turn within lead of now (the generic cell
// rate algorithm: at the later of now and tat - (burst-1) * interval; tat
// moves to the later of tat and the turn, plus an interval). Without
// weights the gates are served in order, each as far as its limits let
// it; with weights (a fair queue's, gates in order of pass) by stride: the
// next job goes to the gate of the lowest pass, which then grows by
// 1/weight. It returns how many jobs each gate may start, at most max in
// all, and which gates' limits had no room for one more; with caps, at
// most caps[i] of gate i, and each job's turn is given to turn. The first
// call (no caps) sizes the claim on copies of the state; the second
// spends the state on the jobs claimed.
func plan(gates []gate, strides []stride, st map[part]*partState, limits map[string]*Limit, now time.Time, lead time.Duration, maxJobs int, turn func(gateIdx int, t time.Time), caps ...int) (out []int, blocked []bool) {
	if caps == nil {
		cp := make(map[part]*partState, len(st))
		for p, s := range st {
			c := *s
			cp[p] = &c
		}
		st = cp
	}
	out, blocked = make([]int, len(gates)), make([]bool, len(gates))
	// room says whether gate i may start one more job, and when.
	room := func(i int) (time.Time, bool) {
		at := now
		for _, p := range gates[i].parts {
			lim := limits[p.name]
			if !lim.counted() {
				continue
			}
			s := st[p]
			if lim.Concurrency > 0 && s.running >= lim.Concurrency {
				return at, false
			}
			if !lim.Rate.IsZero() {
				if earliest := s.tat.Add(-lim.Rate.tolerance()); earliest.After(at) {
					at = earliest
				}
			}
		}
		return at, !at.After(now.Add(lead))
	}
	take := func(i int, at time.Time) {
		for _, p := range gates[i].parts {
			lim := limits[p.name]
			if !lim.counted() {
				continue
			}
			s := st[p]
			s.running++
			if !lim.Rate.IsZero() {
				s.tat = latest(s.tat, at).Add(lim.Rate.Interval())
				s.changed = true
			}
		}
		if turn != nil {
			turn(i, at)
		}
		out[i]++
	}
	capped := func(i int) bool { return caps != nil && out[i] >= caps[i] }
	total := 0
	if strides == nil {
		for i := range gates {
			for total < maxJobs && !capped(i) {
				at, ok := room(i)
				if !ok {
					blocked[i] = out[i] == 0
					break
				}
				take(i, at)
				total++
			}
		}
		return out, blocked
	}
	// Stride: pass[i] is how far gate i has been served.
	pass := make([]float64, len(gates))
	open := make([]bool, len(gates))
	for i := range gates {
		pass[i], open[i] = strides[i].pass, !capped(i)
	}
	for total < maxJobs {
		best := -1
		for i := range gates { // a claim's gates are few (at most maxJobs)
			if open[i] && (best < 0 || pass[i] < pass[best]) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		at, ok := room(best)
		if !ok {
			blocked[best] = out[best] == 0
			open[best] = false
			continue
		}
		take(best, at)
		total++
		pass[best] += 1 / strides[best].weight
		open[best] = !capped(best)
	}
	return out, blocked
}

// stride is a fair queue's gate's weight and pass, as plan reads them.
type stride struct{ weight, pass float64 }

// changedTats lists the parts whose tat the claim moved, for sqlSaveTat.
func changedTats(st map[part]*partState) (names, keys []string, tats []time.Time) {
	for p, s := range st {
		if s.changed {
			names, keys, tats = append(names, p.name), append(keys, p.key), append(tats, s.tat)
		}
	}
	return names, keys, tats
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
