// Package lockoracle runs the fencing oracle of package locks: real
// contender processes (./contender) fight for one lock name while the
// holder is killed (kill -9) and its Postgres sessions terminated
// (pg_terminate_backend), and every write they made under the lock is
// checked afterwards. The locks test runs a small one; the bench harness
// (go run ./tools/bench -mode locks) the large one.
//
// # The oracle
//
// Each contender writes two rows to lock_oracle per acquisition, each in a
// transaction of its own fenced by its token (locks.Fence): acq, then rel.
// Fenced writes of successive holders commit in token order, and a stale
// holder's fenced write fails, so in the order the rows were written (seq)
// the tokens never go down. An overlap is a row whose token is smaller than
// one written before it: two holders acted at once.
//
// # Handover
//
// From a holder's rel row (written just before it releases) to the next
// token's acquisition (its acq row carries ferry_lock.acquired_at), by the
// database's clock, for the releases the contender saw succeed (it then
// writes a released row): the rel row's commit, the release, the wake-up
// and the next acquisition.
//
// # A killed holder
//
// For each kill -9 of the holder: from the kill to the lock free, and from
// the kill to the next holder's acq row. Free is the earlier of the lease's
// expiry (the last expires_at of the killed token that the oracle read
// before the next token; it reads every 10 ms, so a renewal committed
// after the kill shows there) and the next acquisition (a holder that
// released just before the kill). Both by the database's clock.
package lockoracle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/testkit/fleet"
)

// Config of one run.
type Config struct {
	Bin          string // the contender binary
	URL          string // a migrated database (lock_oracle is created in it)
	Procs        int
	Acquisitions int // run until the lock's token reaches this
	TTL          time.Duration
	Kills        int // kill -9 of the holder, spread over the run
	Terminates   int // pg_terminate_backend of the holder's sessions
	Timeout      time.Duration
}

// Result of a run.
type Result struct {
	Procs         int       `json:"procs"`
	Acquisitions  int64     `json:"acquisitions"` // the lock's last token
	FencedWrites  int       `json:"fenced_writes"`
	Overlaps      int       `json:"overlaps"`
	Kills         int       `json:"kills"`
	Terminates    int       `json:"terminates"`
	Handovers     int       `json:"handovers"`
	HandoverP50MS float64   `json:"handover_p50_ms"`
	HandoverP99MS float64   `json:"handover_p99_ms"`
	HandoverMaxMS float64   `json:"handover_max_ms"`
	KillFreeMS    []float64 `json:"kill_free_ms"`        // kill to the lock free (its lease's expiry)
	KillNextMS    []float64 `json:"kill_next_holder_ms"` // kill to the next holder's acq row
	TTLMS         int64     `json:"ttl_ms"`
}

const lockName = "oracle"

// Run starts cfg.Procs contenders, injects the faults, stops them all once
// the lock's token reaches cfg.Acquisitions, and checks lock_oracle.
func Run(ctx context.Context, cfg Config) (Result, error) {
	res := Result{Procs: cfg.Procs, TTLMS: cfg.TTL.Milliseconds()}
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(cfg.Timeout, 10*time.Minute))
	defer cancel()
	pool, err := pgxpool.New(ctx, cfg.URL)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS lock_oracle (
		seq bigserial PRIMARY KEY, token bigint NOT NULL, pid int NOT NULL, kind text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`); err != nil {
		return res, err
	}

	f := fleet.New()
	defer func() { _ = f.Kill(time.Minute) }()
	env := []string{"DATABASE_URL=" + cfg.URL, "LOCK_NAME=" + lockName, "LOCK_TTL=" + cfg.TTL.String()}
	start := func() error {
		p, err := f.Start(cfg.Bin, env)
		if err != nil {
			return err
		}
		_, err = p.WaitForLine(30*time.Second, "contender: started")
		return err
	}
	for range cfg.Procs {
		if err := start(); err != nil {
			return res, err
		}
	}

	faults := cfg.Kills + cfg.Terminates
	type kill struct {
		token  int64
		at     time.Time // by the database's clock, read after the kill
		expiry time.Time // the token's expires_at, read until the next token
	}
	var kills []kill
	next := 0 // faults injected
	for {
		var (
			token   int64
			holder  string
			held    bool
			expires time.Time
		)
		err := pool.QueryRow(ctx, `SELECT token, holder, expires_at > clock_timestamp(), expires_at FROM ferry_lock WHERE name = $1`, lockName).
			Scan(&token, &holder, &held, &expires)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return res, err
		}
		if n := len(kills); n > 0 && kills[n-1].token == token {
			kills[n-1].expiry = expires
		}
		if token >= int64(cfg.Acquisitions) {
			break
		}
		if next < faults && held && token >= int64((next+1)*cfg.Acquisitions/(faults+1)) {
			pid, _ := strconv.Atoi(strings.TrimPrefix(holder, "contender:"))
			if next%2 == 0 && res.Kills < cfg.Kills || res.Terminates >= cfg.Terminates {
				for _, p := range f.Live() {
					if p.Pid() == pid {
						_ = p.Kill()
						var at time.Time
						if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&at); err != nil {
							return res, err
						}
						kills = append(kills, kill{token: token, at: at, expiry: expires})
						res.Kills++
						if err := start(); err != nil {
							return res, err
						}
					}
				}
			} else {
				if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
					WHERE datname = current_database() AND application_name = $1`, holder); err != nil {
					return res, err
				}
				res.Terminates++
			}
			next++
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("oracle: token %d of %d when the run timed out", token, cfg.Acquisitions)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := f.Kill(time.Minute); err != nil {
		return res, err
	}
	if err := pool.QueryRow(ctx, `SELECT token FROM ferry_lock WHERE name = $1`, lockName).Scan(&res.Acquisitions); err != nil {
		return res, err
	}
	if err := check(ctx, pool, &res); err != nil {
		return res, err
	}
	for _, k := range kills {
		var after *time.Time
		if err := pool.QueryRow(ctx, `SELECT min(at) FROM lock_oracle WHERE kind = 'acq' AND token > $1`, k.token).Scan(&after); err != nil {
			return res, err
		}
		if after != nil {
			free := k.expiry
			if after.Before(free) {
				free = *after // released before the kill, then taken
			}
			res.KillFreeMS = append(res.KillFreeMS, ms(free.Sub(k.at)))
			res.KillNextMS = append(res.KillNextMS, ms(after.Sub(k.at)))
		}
	}
	return res, nil
}

// check reads lock_oracle in write order: overlaps and handovers.
func check(ctx context.Context, pool *pgxpool.Pool, res *Result) error {
	rows, err := pool.Query(ctx, `SELECT token, kind, at FROM lock_oracle ORDER BY seq`)
	if err != nil {
		return err
	}
	defer rows.Close()
	var (
		maxToken int64
		rel      = map[int64]time.Time{}
		acq      = map[int64]time.Time{}
		released = map[int64]bool{}
	)
	for rows.Next() {
		var (
			token int64
			kind  string
			at    time.Time
		)
		if err := rows.Scan(&token, &kind, &at); err != nil {
			return err
		}
		switch kind {
		case "released":
			released[token] = true
			continue
		case "acq":
			acq[token] = at
		case "rel":
			if _, ok := rel[token]; !ok {
				rel[token] = at
			}
		}
		res.FencedWrites++
		if token < maxToken {
			res.Overlaps++
		}
		maxToken = max(maxToken, token)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	var hand []time.Duration
	for t, r := range rel {
		if a, ok := acq[t+1]; ok && released[t] {
			hand = append(hand, a.Sub(r))
		}
	}
	slices.Sort(hand)
	res.Handovers = len(hand)
	if len(hand) > 0 {
		res.HandoverP50MS = ms(hand[len(hand)/2])
		res.HandoverP99MS = ms(hand[min(len(hand)-1, len(hand)*99/100)])
		res.HandoverMaxMS = ms(hand[len(hand)-1])
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
