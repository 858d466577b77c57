package main

import (
	"context"
	"fmt"
	"log"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/base/loop"
)

// autovacuumStandIn does, for one database of a server whose autovacuum is
// off, what autovacuum at the server's settings would: every
// autovacuum_naptime, it vacuums each table whose dead rows exceed
// autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor × its rows
// (or whose inserts since its last vacuum exceed the insert pair), and
// analyzes each whose changes since its last analyze exceed the analyze
// pair, throttled by autovacuum's cost settings. A long run
// measured on such a server otherwise measures a database nobody would
// run: every row version a job leaves behind stays in the table and its
// indexes. On a server with autovacuum on it does nothing.
type autovacuumStandIn struct {
	pool *pgxpool.Pool
	set  map[string]string

	cancel context.CancelFunc
	exited chan struct{} // closed when the loop has returned

	// Written by the loop only; read by stop once exited is closed.
	vacuums  int
	analyzes int
	err      error
}

// autovacuumSettings are the server settings the stand-in follows.
var autovacuumSettings = []string{"autovacuum", "autovacuum_naptime", "autovacuum_vacuum_threshold",
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
	ctx, cancel := context.WithCancel(ctx)
	a := &autovacuumStandIn{pool: pool, set: set, cancel: cancel, exited: make(chan struct{})}
	naptime, err := strconv.Atoi(set["autovacuum_naptime"]) // seconds
	if err != nil || naptime <= 0 {
		cancel()
		return nil, fmt.Errorf("autovacuum_naptime %q", set["autovacuum_naptime"])
	}
	log.Printf("bench: the server's autovacuum is off: the bench vacuums as autovacuum would, every %d s", naptime)
	go func() {
		defer close(a.exited)
		nap := time.Duration(naptime) * time.Second
		select { // autovacuum's first look comes a naptime after the start
		case <-ctx.Done():
			return
		case <-time.After(nap):
		}
		a.err = loop.Every(ctx, nap, a.pass)
	}()
	return a, nil
}

// pass vacuums and analyzes what is due, one table at a time, on one
// connection throttled as autovacuum's workers are.
func (a *autovacuumStandIn) pass(ctx context.Context) error {
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	limit := a.set["autovacuum_vacuum_cost_limit"]
	if limit == "-1" {
		limit = a.set["vacuum_cost_limit"]
	}
	delay := a.set["autovacuum_vacuum_cost_delay"] // milliseconds
	if delay == "-1" {
		delay = "0"
	}
	if _, err := conn.Exec(ctx, "SELECT set_config('vacuum_cost_delay', $1, false), set_config('vacuum_cost_limit', $2, false)", delay, limit); err != nil {
		return fmt.Errorf("autovacuum stand-in: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT quote_ident(s.schemaname) || '.' || quote_ident(s.relname),
			s.n_dead_tup > $1::float8 + $2::float8 * greatest(c.reltuples, 0)
				OR ($3::float8 >= 0 AND s.n_ins_since_vacuum > $3::float8 + $4::float8 * greatest(c.reltuples, 0)),
			s.n_mod_since_analyze > $5::float8 + $6::float8 * greatest(c.reltuples, 0)
		FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid`,
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
		stmt := "VACUUM (ANALYZE) "
		if !d.vacuum {
			stmt = "ANALYZE "
		} else if !d.analyze {
			stmt = "VACUUM "
		}
		if _, err := conn.Exec(ctx, stmt+d.table); err != nil {
			return fmt.Errorf("autovacuum stand-in: %s%s: %w", stmt, d.table, err)
		}
		if d.vacuum {
			a.vacuums++
		}
		if d.analyze {
			a.analyzes++
		}
	}
	return nil
}

// stop stops the stand-in (a pass under way is cancelled), waits for it,
// and returns how many vacuums and analyzes it ran and the error that
// stopped it before. It may be called more than once.
func (a *autovacuumStandIn) stop() (vacuums, analyzes int, err error) {
	if a == nil {
		return 0, 0, nil
	}
	a.cancel()
	<-a.exited
	return a.vacuums, a.analyzes, a.err
}
