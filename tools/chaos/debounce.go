package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// nameDebounce is the debounce check.
const nameDebounce = "debounce: a key's runs never overlap, its last insert runs"

// Debounced inserts: debounceKeys keys, each inserted every 50 to 250 ms
// through the load window, debounced over debounceWindow, each run
// sleeping debounceSleepMS (so that inserts arrive while a key's job runs,
// and faults strike running jobs).
const (
	debounceKeys    = 5
	debounceWindow  = 100 * time.Millisecond
	debounceSleepMS = 150
)

// dbRun is what the producer did: per key, the highest sequence number
// whose insert committed, and the highest it tried (an insert whose reply
// was lost may have committed).
type dbRun struct {
	mu        sync.Mutex
	committed map[string]int
	tried     map[string]int
	inserts   int
}

// produceDebounced inserts each key's sequence 1, 2, … until ctx ends,
// each insert retried until it commits.
func (s *suite) produceDebounced(ctx context.Context, r *dbRun) {
	r.mu.Lock()
	r.committed, r.tried = map[string]int{}, map[string]int{}
	r.mu.Unlock()
	ins, err := jobs.NewInserter(s.jobPool, jobs.WithSealKeys(nil))
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for k := range debounceKeys {
		key := fmt.Sprintf("key-%d", k)
		wg.Go(func() {
			opts := jobs.WithDebounce(&river.InsertOpts{Queue: river.QueueDefault}, key, debounceWindow)
			for seq := 1; ctx.Err() == nil; seq++ {
				r.mu.Lock()
				r.tried[key] = seq
				r.mu.Unlock()
				for ctx.Err() == nil {
					err := pgx.BeginFunc(ctx, s.jobPool, func(tx pgx.Tx) error {
						_, err := ins.InsertTx(ctx, tx, jobs.RawArgs{KindName: "chaos.debounced",
							JSON: fmt.Appendf(nil, `{"key":%q,"seq":%d,"sleep_ms":%d}`, key, seq, debounceSleepMS)}, opts)
						return err
					})
					if err == nil {
						r.mu.Lock()
						r.committed[key] = seq
						r.inserts++
						r.mu.Unlock()
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
				select {
				case <-ctx.Done():
				case <-time.After(time.Duration(50+rand.IntN(200)) * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
}

// dbObs is what the oracle reads of the debounced runs.
type dbObs struct {
	run      *dbRun
	lastRun  map[string]int // key → the highest sequence number that ran
	runs     int
	overlaps []string // runs that started while another job of their key ran
	err      error
}

func observeDebounced(ctx context.Context, pool *pgxpool.Pool, r *dbRun) dbObs {
	o := dbObs{run: r, lastRun: map[string]int{}}
	rows, _ := pool.Query(ctx, `SELECT key, max(seq), count(*) FROM chaos_db_run GROUP BY key`)
	var (
		key     string
		seq, n  int
		overlap string
	)
	if _, o.err = pgx.ForEachRow(rows, []any{&key, &seq, &n}, func() error {
		o.lastRun[key], o.runs = seq, o.runs+n
		return nil
	}); o.err != nil {
		return o
	}
	rows, _ = pool.Query(ctx, `SELECT format('job %s of %s (seq %s) beside %s', job_id, key, seq, others) FROM chaos_db_run WHERE others > 0 ORDER BY at LIMIT 20`)
	_, o.err = pgx.ForEachRow(rows, []any{&overlap}, func() error { o.overlaps = append(o.overlaps, overlap); return nil })
	return o
}

// checkDebounced: no run of a key started while another job of the key
// ran, and each key's last committed insert ran (its sequence number, or
// a later one whose insert's reply was lost, is the highest that ran).
// No insert or no run is unverified.
func checkDebounced(o dbObs) check {
	if o.err != nil {
		return newCheck(nameDebounce, verdictUnverified, "query failed: %v", o.err)
	}
	r := o.run
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inserts == 0 || o.runs == 0 {
		return newCheck(nameDebounce, verdictUnverified, "%d inserts committed, %d runs", r.inserts, o.runs)
	}
	var lost []string
	for key, seq := range r.committed {
		if got := o.lastRun[key]; got < seq || got > r.tried[key] {
			lost = append(lost, fmt.Sprintf("%s: last committed insert %d, last run %d", key, seq, got))
		}
	}
	if len(o.overlaps) > 0 || len(lost) > 0 {
		return newCheck(nameDebounce, verdictViolated, "runs beside another of their key %v; last inserts not run %v", o.overlaps, lost)
	}
	return newCheck(nameDebounce, verdictOK, "%d debounced inserts on %d keys became %d runs: none beside another of its key, each key's last insert run",
		r.inserts, len(r.committed), o.runs)
}
