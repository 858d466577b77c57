package limit

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Status is a limit as the workers registered it and its use now.
type Status struct {
	Limit
	// SeenAt is when a worker last marked the limit seen.
	SeenAt time.Time
	// Running is how many of the limit's jobs run (its slots held, for a
	// concurrency), Tokens how much of its burst is spent (rate), Waiting
	// how many jobs are parked behind it: totals over its keys.
	Running int
	Tokens  int
	Waiting int
	// Keys are the keys with a slot held, a token spent or a job waiting,
	// the busiest first.
	Keys []KeyStatus
}

// KeyStatus is one key's use of a limit.
type KeyStatus struct {
	Key     string
	Running int
	Tokens  int
	Waiting int
}

const (
	sqlListLimits = `SELECT name, coalesce(kind, ''), coalesce(queue, ''), coalesce(key_field, ''),
    coalesce(concurrency, 0), coalesce(rate_count, 0), coalesce(rate_period, interval '0'), coalesce(burst, 0), seen_at
FROM ferry_limit WHERE seen_at > now() - make_interval(secs => $1) AND NOT fair ORDER BY name`

	// sqlGateJobs counts the jobs running through each gate and those
	// parked behind it.
	sqlGateJobs = `WITH jobs AS (
    SELECT gate, sum(running) AS running, sum(waiting) AS waiting FROM (
        SELECT (metadata->>'ferry_gate')::bigint AS gate, 1 AS running, 0 AS waiting
        FROM river_job WHERE state = 'running' AND metadata ? 'ferry_gate'
        UNION ALL
        SELECT (metadata->>'ferry_gate')::bigint, 0, 1
        FROM river_job WHERE state = 'pending' AND metadata ? 'ferry_gate') j
    GROUP BY 1)`

	// sqlListUse counts, per limit and key, the jobs running through its
	// gates and the jobs parked behind them, and how far the rate's tat
	// lies ahead (in seconds).
	sqlListUse = sqlGateJobs + `,
parts AS (
    SELECT gp.limit_name, gp.key, sum(jobs.running)::bigint AS running, sum(jobs.waiting)::bigint AS waiting
    FROM ferry_limit_gate_part gp JOIN jobs ON jobs.gate = gp.gate_id
    GROUP BY 1, 2),
rates AS (SELECT limit_name, key, extract(epoch FROM tat - clock_timestamp())::float8 AS ahead
    FROM ferry_limit_rate WHERE tat > clock_timestamp())
SELECT limit_name, key, coalesce(parts.running, 0), coalesce(parts.waiting, 0), coalesce(rates.ahead, 0)
FROM parts FULL JOIN rates USING (limit_name, key)`
)

// Querier is what List reads through: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// List returns the limits that some worker enforces (marked seen in the
// last ten minutes), by name, with their use now.
func List(ctx context.Context, q Querier) ([]Status, error) {
	rows, err := q.Query(ctx, sqlListLimits, goneAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("limits: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Status, error) {
		var s Status
		err := row.Scan(&s.Name, &s.Kind, &s.Queue, &s.KeyField, &s.Concurrency,
			&s.Rate.Count, &s.Rate.Period, &s.Rate.Burst, &s.SeenAt)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("limits: list: %w", err)
	}
	byName := map[string]*Status{}
	for i := range out {
		byName[out[i].Name] = &out[i]
	}
	rows, err = q.Query(ctx, sqlListUse)
	if err != nil {
		return nil, fmt.Errorf("limits: read use: %w", err)
	}
	type use struct {
		name, key        string
		running, waiting int
		ahead            float64
	}
	uses, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (use, error) {
		var u use
		err := row.Scan(&u.name, &u.key, &u.running, &u.waiting, &u.ahead)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("limits: read use: %w", err)
	}
	for _, u := range uses {
		s := byName[u.name]
		if s == nil {
			continue
		}
		k := KeyStatus{Key: u.key, Running: u.running, Waiting: u.waiting}
		if !s.Rate.IsZero() && u.ahead > 0 {
			// The tat lies ahead by one interval per token spent.
			k.Tokens = min(s.Rate.Burst, int(math.Ceil(u.ahead/s.Rate.Interval().Seconds()-1e-9)))
		}
		if k.Running+k.Tokens+k.Waiting == 0 {
			continue
		}
		s.Keys = append(s.Keys, k)
		s.Running += k.Running
		s.Tokens += k.Tokens
		s.Waiting += k.Waiting
	}
	for i := range out {
		slices.SortFunc(out[i].Keys, func(a, b KeyStatus) int {
			if c := (b.Running + b.Tokens + b.Waiting) - (a.Running + a.Tokens + a.Waiting); c != 0 {
				return c
			}
			return cmp.Compare(a.Key, b.Key)
		})
	}
	return out, nil
}

// FairStatus is a queue's fairness as the workers registered it, with its
// keys now.
type FairStatus struct {
	Queue    string
	KeyField string
	Fairness
	// SeenAt is when a worker last marked the fairness seen.
	SeenAt time.Time
	// Running and Waiting are totals over the keys.
	Running int
	Waiting int
	// Keys are the keys with a gate, the most waiting first.
	Keys []FairKeyStatus
}

// FairKeyStatus is one key of a fair queue: its weight, its jobs running
// and parked, and the jobs started from it since its gate was made (a
// key idle for a day starts again from 0).
type FairKeyStatus struct {
	Key     string
	Weight  float64
	Running int
	Waiting int
	Started int64
}

const (
	sqlListFair = `SELECT queue, key_field, coalesce(weights, '{}'), coalesce(default_weight, 1), seen_at
FROM ferry_limit WHERE seen_at > now() - make_interval(secs => $1) AND fair ORDER BY queue`

	// sqlFairUse reads, per fairness and key, the jobs running and parked
	// and the jobs started.
	sqlFairUse = sqlGateJobs + `
SELECT gp.limit_name, gp.key, coalesce(sum(jobs.running), 0)::bigint, coalesce(sum(jobs.waiting), 0)::bigint,
    coalesce(sum(s.started), 0)::bigint
FROM ferry_limit_gate_part gp
JOIN ferry_limit l ON l.name = gp.limit_name AND l.fair
LEFT JOIN ferry_limit_gate_started s ON s.gate_id = gp.gate_id
LEFT JOIN jobs ON jobs.gate = gp.gate_id
GROUP BY 1, 2`
)

// ListFair returns the fair queues that some worker serves (their
// fairness marked seen in the last ten minutes), by queue, with their
// keys now.
func ListFair(ctx context.Context, q Querier) ([]FairStatus, error) {
	rows, err := q.Query(ctx, sqlListFair, goneAfter.Seconds())
	if err != nil {
		return nil, fmt.Errorf("fairness: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FairStatus, error) {
		var s FairStatus
		err := row.Scan(&s.Queue, &s.KeyField, &s.Weights, &s.DefaultWeight, &s.SeenAt)
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("fairness: list: %w", err)
	}
	byName := map[string]*FairStatus{}
	for i := range out {
		byName[FairName(out[i].Queue)] = &out[i]
	}
	rows, err = q.Query(ctx, sqlFairUse)
	if err != nil {
		return nil, fmt.Errorf("fairness: read keys: %w", err)
	}
	type use struct {
		name string
		k    FairKeyStatus
	}
	uses, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (use, error) {
		var u use
		err := row.Scan(&u.name, &u.k.Key, &u.k.Running, &u.k.Waiting, &u.k.Started)
		return u, err
	})
	if err != nil {
		return nil, fmt.Errorf("fairness: read keys: %w", err)
	}
	for _, u := range uses {
		s := byName[u.name]
		if s == nil {
			continue
		}
		u.k.Weight = s.Weight(u.k.Key)
		s.Keys = append(s.Keys, u.k)
		s.Running += u.k.Running
		s.Waiting += u.k.Waiting
	}
	for i := range out {
		slices.SortFunc(out[i].Keys, func(a, b FairKeyStatus) int {
			if c := (b.Waiting + b.Running) - (a.Waiting + a.Running); c != 0 {
				return c
			}
			return cmp.Compare(a.Key, b.Key)
		})
	}
	return out, nil
}
