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
	// Postgres's defaults, but a one-second naptime.
	set := map[string]string{"autovacuum_naptime": "1", "autovacuum_max_workers": "3",
		"autovacuum_vacuum_threshold": "50", "autovacuum_vacuum_scale_factor": "0.2",
		"autovacuum_vacuum_insert_threshold": "1000", "autovacuum_vacuum_insert_scale_factor": "0.2",
		"autovacuum_analyze_threshold": "50", "autovacuum_analyze_scale_factor": "0.1",
		"autovacuum_vacuum_cost_delay": "2", "autovacuum_vacuum_cost_limit": "-1", "vacuum_cost_limit": "200"}
	a, err := runAutovacuumStandIn(ctx, pool, set)
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
		churned = churned || r.Statement == "VACUUM (ANALYZE) public.churn"
		require.GreaterOrEqual(t, r.AtS, 1.0, "the first look comes a naptime after the start")
	}
	require.True(t, churned, "%+v", runs)
	var dead int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'churn'`).Scan(&dead))
	require.Zero(t, dead)

	_, err = runAutovacuumStandIn(ctx, pool, map[string]string{"autovacuum_naptime": "1", "autovacuum_max_workers": "0"})
	require.ErrorContains(t, err, "autovacuum_max_workers")
}
