package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestAutovacuumStandIn: on a table past autovacuum's thresholds the
// stand-in's workers vacuum and analyze it, one worker per table at a
// time, and say when; stop reports what they did.
func TestAutovacuumStandIn(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, false))
	_, err := pool.Exec(ctx, `CREATE TABLE churn (id int PRIMARY KEY, v int);
		INSERT INTO churn SELECT g, 0 FROM generate_series(1, 20000) g;
		CREATE TABLE quiet (id int PRIMARY KEY)`)
	require.NoError(t, err)
	a, err := runAutovacuumStandIn(ctx, pool, autovacuumDefaults("1"))
	require.NoError(t, err)
	defer func() { _, _, _, _ = a.stop() }()

	// Every row updated twice: 40,000 dead rows, past 50 + 0.2 × 20,000.
	for range 2 {
		_, err = pool.Exec(ctx, `UPDATE churn SET v = v + 1`)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.vacuums > 0
	}, 30*time.Second, 100*time.Millisecond, "churn vacuumed")

	vacuums, analyzes, runs, err := a.stop()
	require.NoError(t, err)
	require.Positive(t, vacuums)
	require.Positive(t, analyzes)
	require.NotEmpty(t, runs)
	var churned bool
	for _, r := range runs {
		require.NotContains(t, r.Statement, "quiet", "an untouched table is left alone")
		churned = churned || r.Statement == "VACUUM (PARALLEL 0, ANALYZE) public.churn"
	}
	require.True(t, churned, "%+v", runs)
	var dead int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'churn'`).Scan(&dead))
	require.Zero(t, dead)

	_, err = runAutovacuumStandIn(ctx, pool, map[string]string{"autovacuum_naptime": "1", "autovacuum_max_workers": "0"})
	require.ErrorContains(t, err, "autovacuum_max_workers")
}

// TestAutovacuumStandIn_TableSettings: a table's own autovacuum storage
// parameters win over the server's, as autovacuum takes them, and the
// first look comes at once (a naptime of an hour: there is no second).
func TestAutovacuumStandIn_TableSettings(t *testing.T) {
	ctx := t.Context()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, false))
	// 1,000 dead rows in each of three tables of 20,000: short of the
	// server's 50 + 0.2 × 20,000, past river_job's 0 × rows + 500 after
	// a migration-027-like setting, and past off's too, but its
	// autovacuum is off.
	_, err := pool.Exec(ctx, `CREATE TABLE plain (id int PRIMARY KEY, v int);
		CREATE TABLE queue (id int PRIMARY KEY, v int) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500);
		CREATE TABLE off (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = false, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500);
		INSERT INTO plain SELECT g, 0 FROM generate_series(1, 20000) g;
		INSERT INTO queue SELECT g, 0 FROM generate_series(1, 20000) g;
		INSERT INTO off SELECT g, 0 FROM generate_series(1, 20000) g`)
	require.NoError(t, err)
	// Statistics reach pg_stat_user_tables within a second or so: the
	// inserts must be counted before the vacuum that clears their count.
	counted := func(cond string) func() bool {
		return func() bool {
			var n int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_user_tables WHERE `+cond).Scan(&n)
			return err == nil && n == 3
		}
	}
	require.Eventually(t, counted("n_tup_ins = 20000"), 30*time.Second, 100*time.Millisecond, "inserts counted")
	_, err = pool.Exec(ctx, `VACUUM ANALYZE plain, queue, off`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `UPDATE plain SET v = 1 WHERE id <= 1000;
		UPDATE queue SET v = 1 WHERE id <= 1000;
		UPDATE off SET v = 1 WHERE id <= 1000`)
	require.NoError(t, err)
	require.Eventually(t, counted("n_dead_tup >= 1000 AND n_ins_since_vacuum = 0"), 30*time.Second, 100*time.Millisecond, "dead rows counted")

	a, err := runAutovacuumStandIn(ctx, pool, autovacuumDefaults("3600"))
	require.NoError(t, err)
	defer func() { _, _, _, _ = a.stop() }()
	// The first look's pass: launched at once, over when no worker runs.
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.workers == 0 && len(a.runs) > 0
	}, 30*time.Second, 100*time.Millisecond, "the first look vacuumed")
	_, _, runs, err := a.stop()
	require.NoError(t, err)
	var statements []string
	for _, r := range runs {
		statements = append(statements, r.Statement)
	}
	require.Equal(t, []string{"VACUUM (PARALLEL 0) public.queue"}, statements,
		"only the table whose own threshold it passed, indexes one after the other")
}

// autovacuumDefaults are Postgres's defaults of the stand-in's settings
// but the naptime (seconds).
func autovacuumDefaults(naptime string) map[string]string {
	return map[string]string{"autovacuum_naptime": naptime, "autovacuum_max_workers": "3",
		"autovacuum_vacuum_threshold": "50", "autovacuum_vacuum_scale_factor": "0.2",
		"autovacuum_vacuum_insert_threshold": "1000", "autovacuum_vacuum_insert_scale_factor": "0.2",
		"autovacuum_analyze_threshold": "50", "autovacuum_analyze_scale_factor": "0.1",
		"autovacuum_vacuum_cost_delay": "2", "autovacuum_vacuum_cost_limit": "-1", "vacuum_cost_limit": "200"}
}
