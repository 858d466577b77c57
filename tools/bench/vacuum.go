package main

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// autovacuumStandIn does, for one database of a server whose autovacuum is
// off, what autovacuum at the server's settings would: every
// autovacuum_naptime (from the last launch, not the last pass's end, as
// autovacuum's launcher does) it starts a worker, when fewer than
// autovacuum_max_workers run, which vacuums each table whose dead rows
// exceed autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor ×
// its rows (or whose inserts since its last vacuum exceed the insert
// pair), and analyzes each whose changes since its last analyze exceed the
// analyze pair, one table after the other, skipping a table another
// worker is on, throttled by autovacuum's cost settings with the cost
// limit shared among the workers running. A long run measured on such a
// server otherwise measures a database nobody would run: every row version
// a job leaves behind stays in the table and its indexes. On a server
// with autovacuum on it does nothing.
//
// As autovacuum does, it takes a table's own storage parameters over the
// server's for when to vacuum and analyze it (autovacuum_enabled and the
// six thresholds and scale factors: ferry's migration 027 sets river_job's
// vacuum pair), and vacuums a table's indexes one after the other:
// VACUUM (PARALLEL 0), since a plain VACUUM would hand them to parallel
// workers, which autovacuum never starts. It does not follow a table's
// own cost settings (no table of ferry's or River's sets them).
//
// The server's launcher runs from its start, long before any load, so the
// stand-in takes its first look at once and then every naptime: each
// minute of a run started with it, the first too, begins with a look.
//
// Its first form ran one pass at a time and waited a naptime after each
// pass ended: with river_job's vacuum taking 20 to 40 s, it vacuumed 7
// times in ten minutes and left 1.35 million dead tuples where the
// server's own autovacuum, on the same server and load, left 0.70 million.
// Its second took its first look a naptime after its start, so a run's
// first minute was the only one without a vacuum, and vacuumed indexes in
// parallel.
type autovacuumStandIn struct {
	pool *pgxpool.Pool
	set  map[string]string

	cancel context.CancelFunc
	exited chan struct{} // closed when the launcher and its workers have returned
	start  time.Time

	mu       sync.Mutex
	workers  int             // running
	busy     map[string]bool // tables a worker is on
	vacuums  int
	analyzes int
	runs     []vacuumRun
	err      error // the first
}

// vacuumRun is one statement the stand-in ran: when (seconds after the
// stand-in started, just before the load it runs beside) and for how
// long, so that a run's latency by minute can be read against it.
type vacuumRun struct {
	Statement string  `json:"statement"`
	AtS       float64 `json:"at_s"`
	Seconds   float64 `json:"seconds"`
}

// autovacuumSettings are the server settings the stand-in follows.
var autovacuumSettings = []string{"autovacuum", "autovacuum_naptime", "autovacuum_max_workers", "autovacuum_vacuum_threshold",
	"autovacuum_vacuum_scale_factor", "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_insert_scale_factor",
	"autovacuum_analyze_threshold", "autovacuum_analyze_scale_factor",
	"autovacuum_vacuum_cost_delay", "autovacuum_vacuum_cost_limit", "vacuum_cost_limit"}

// startAutovacuumStandIn reads the server's autovacuum settings and, when
// autovacuum is off, runs the stand-in until stop (or ctx ends); nil when
// autovacuum is on.
func startAutovacuumStandIn(ctx context.Context, pool *pgxpool.Pool) (*autovacuumStandIn, error) {
	rows, err := pool.Query(ctx, `SELECT name, setting FROM pg_settings WHERE name = ANY($1)`, autovacuumSettings)
	if err != nil {
		return nil, fmt.Errorf("read autovacuum's settings: %w", err)
	}
	set := map[string]string{}
	var name, setting string
	if _, err := pgx.ForEachRow(rows, []any{&name, &setting}, func() error { set[name] = setting; return nil }); err != nil {
		return nil, fmt.Errorf("read autovacuum's settings: %w", err)
	}
	if len(set) != len(autovacuumSettings) {
		return nil, fmt.Errorf("read autovacuum's settings: %d of %d", len(set), len(autovacuumSettings))
	}
	if set["autovacuum"] == "on" {
		return nil, nil
	}
	a, err := runAutovacuumStandIn(ctx, pool, set)
	if err == nil {
		log.Printf("bench: the server's autovacuum is off: the bench vacuums as autovacuum would, every %s s, with up to %s workers", set["autovacuum_naptime"], set["autovacuum_max_workers"])
	}
	return a, err
}

// runAutovacuumStandIn runs the stand-in at the settings set (each of
// autovacuumSettings but autovacuum) until stop.
func runAutovacuumStandIn(ctx context.Context, pool *pgxpool.Pool, set map[string]string) (*autovacuumStandIn, error) {
	naptime, err := strconv.Atoi(set["autovacuum_naptime"]) // seconds
	if err != nil || naptime <= 0 {
		return nil, fmt.Errorf("autovacuum_naptime %q", set["autovacuum_naptime"])
	}
	maxWorkers, err := strconv.Atoi(set["autovacuum_max_workers"])
	if err != nil || maxWorkers <= 0 {
		return nil, fmt.Errorf("autovacuum_max_workers %q", set["autovacuum_max_workers"])
	}
	ctx, cancel := context.WithCancel(ctx)
	a := &autovacuumStandIn{pool: pool, set: set, cancel: cancel, exited: make(chan struct{}), start: time.Now(), busy: map[string]bool{}}
	go func() {
		var wg sync.WaitGroup
		defer close(a.exited)
		defer wg.Wait()
		// The launcher: a look at once, then one every naptime.
		t := time.NewTicker(time.Duration(naptime) * time.Second)
		defer t.Stop()
		for {
			a.mu.Lock()
			launch := a.workers < maxWorkers
			if launch {
				a.workers++
			}
			a.mu.Unlock()
			if launch {
				wg.Go(func() {
					err := a.pass(ctx)
					a.mu.Lock()
					defer a.mu.Unlock()
					a.workers--
					if err != nil && ctx.Err() == nil && a.err == nil {
						a.err = err
						a.cancel()
					}
				})
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return a, nil
}

// pass is one worker's: it vacuums and analyzes what is due, one table
// at a time, on one connection throttled as autovacuum's workers are,
// skipping the tables another worker is on.
func (a *autovacuumStandIn) pass(ctx context.Context) error {
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	limit, err := strconv.Atoi(a.set["autovacuum_vacuum_cost_limit"])
	if err != nil {
		return fmt.Errorf("autovacuum_vacuum_cost_limit %q", a.set["autovacuum_vacuum_cost_limit"])
	}
	if limit == -1 {
		if limit, err = strconv.Atoi(a.set["vacuum_cost_limit"]); err != nil {
			return fmt.Errorf("vacuum_cost_limit %q", a.set["vacuum_cost_limit"])
		}
	}
	delay := a.set["autovacuum_vacuum_cost_delay"] // milliseconds
	if delay == "-1" {
		delay = "0"
	}
	if _, err := conn.Exec(ctx, "SELECT set_config('vacuum_cost_delay', $1, false)", delay); err != nil {
		return fmt.Errorf("autovacuum stand-in: %w", err)
	}
	// A table's storage parameters (pg_class.reloptions, "name=value")
	// over the server's settings, as autovacuum takes them.
	rows, err := conn.Query(ctx, `WITH stat AS (
			SELECT s.*, greatest(c.reltuples, 0) AS rows,
				coalesce((SELECT jsonb_object_agg(split_part(o, '=', 1), substr(o, strpos(o, '=') + 1))
					FROM unnest(c.reloptions) o), '{}') AS opt
			FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
		), t AS (
			SELECT quote_ident(schemaname) || '.' || quote_ident(relname) AS name,
				n_dead_tup, n_ins_since_vacuum, n_mod_since_analyze, rows,
				coalesce((opt->>'autovacuum_enabled')::bool, true) AS enabled,
				coalesce((opt->>'autovacuum_vacuum_threshold')::float8, $1::float8) AS vac_min,
				coalesce((opt->>'autovacuum_vacuum_scale_factor')::float8, $2::float8) AS vac_scale,
				coalesce((opt->>'autovacuum_vacuum_insert_threshold')::float8, $3::float8) AS ins_min,
				coalesce((opt->>'autovacuum_vacuum_insert_scale_factor')::float8, $4::float8) AS ins_scale,
				coalesce((opt->>'autovacuum_analyze_threshold')::float8, $5::float8) AS an_min,
				coalesce((opt->>'autovacuum_analyze_scale_factor')::float8, $6::float8) AS an_scale
			FROM stat)
		SELECT name,
			enabled AND (n_dead_tup > vac_min + vac_scale * rows OR (ins_min >= 0 AND n_ins_since_vacuum > ins_min + ins_scale * rows)),
			enabled AND n_mod_since_analyze > an_min + an_scale * rows
		FROM t`,
		a.set["autovacuum_vacuum_threshold"], a.set["autovacuum_vacuum_scale_factor"],
		a.set["autovacuum_vacuum_insert_threshold"], a.set["autovacuum_vacuum_insert_scale_factor"],
		a.set["autovacuum_analyze_threshold"], a.set["autovacuum_analyze_scale_factor"])
	if err != nil {
		return fmt.Errorf("autovacuum stand-in: %w", err)
	}
	type due struct {
		table           string
		vacuum, analyze bool
	}
	var (
		d    due
		dues []due
	)
	if _, err := pgx.ForEachRow(rows, []any{&d.table, &d.vacuum, &d.analyze}, func() error {
		if d.vacuum || d.analyze {
			dues = append(dues, d)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("autovacuum stand-in: %w", err)
	}
	for _, d := range dues {
		if err := a.table(ctx, conn, d.table, d.vacuum, d.analyze, limit); err != nil {
			return err
		}
	}
	return nil
}

// table vacuums or analyzes (or both) one table unless another worker is
// on it, at its share of the cost limit (autovacuum balances the limit
// among its running workers).
func (a *autovacuumStandIn) table(ctx context.Context, conn *pgxpool.Conn, table string, vacuum, analyze bool, limit int) error {
	a.mu.Lock()
	if a.busy[table] {
		a.mu.Unlock()
		return nil
	}
	a.busy[table] = true
	share := max(1, limit/a.workers)
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.busy, table)
		a.mu.Unlock()
	}()
	stmt := "VACUUM (PARALLEL 0, ANALYZE) "
	if !vacuum {
		stmt = "ANALYZE "
	} else if !analyze {
		stmt = "VACUUM (PARALLEL 0) "
	}
	if _, err := conn.Exec(ctx, "SELECT set_config('vacuum_cost_limit', $1, false)", strconv.Itoa(share)); err != nil {
		return fmt.Errorf("autovacuum stand-in: %w", err)
	}
	began := time.Now()
	if _, err := conn.Exec(ctx, stmt+table); err != nil {
		return fmt.Errorf("autovacuum stand-in: %s%s: %w", stmt, table, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runs = append(a.runs, vacuumRun{Statement: stmt + table, AtS: began.Sub(a.start).Seconds(), Seconds: time.Since(began).Seconds()})
	if vacuum {
		a.vacuums++
	}
	if analyze {
		a.analyzes++
	}
	return nil
}

// stop stops the stand-in (a pass under way is cancelled), waits for it,
// and returns how many vacuums and analyzes it ran, each statement, and
// the error that stopped it before. It may be called more than once.
func (a *autovacuumStandIn) stop() (vacuums, analyzes int, runs []vacuumRun, err error) {
	if a == nil {
		return 0, 0, nil, nil
	}
	a.cancel()
	<-a.exited
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.vacuums, a.analyzes, a.runs, a.err
}
