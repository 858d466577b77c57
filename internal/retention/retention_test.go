package retention

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Old rows go, in batches, and recent ones stay; the newest tick of each
// schedule and the newest term of each key stay however old.
func TestCleaner_Clean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	_, err := pool.Exec(ctx, `
INSERT INTO ferry_periodic_tick (schedule_id, tick_at, term, status, reason)
SELECT 'hourly', now() - make_interval(days => 40) + make_interval(hours => g), 1, 'skipped', 'test'
FROM generate_series(0, 6) g;
INSERT INTO ferry_periodic_tick (schedule_id, tick_at, term, status, reason) VALUES
    ('old-only', now() - interval '50 days', 1, 'skipped', 'test'),
    ('old-only', now() - interval '49 days', 1, 'skipped', 'test'),
    ('recent', now() - interval '1 hour', 1, 'skipped', 'test'),
    ('hourly', now() - interval '1 day', 1, 'skipped', 'test');
INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid, acquired_at)
SELECT k, 'h', 'host', 1, 1, now() - make_interval(days => 60 - g)
FROM generate_series(1, 5) g, (VALUES (1::bigint), (2::bigint)) AS keys(k);
INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid) VALUES (1, 'h', 'host', 1, 1);
INSERT INTO ferry_telegram_malformed (bot, raw, error, received_at) VALUES
    ('b', 'x', 'e', now() - interval '31 days'), ('b', 'y', 'e', now() - interval '29 days')`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	logs := &logtest.Recorder{}
	c, err := New(Config{Pool: pool, Tables: Tables(0, 0, 0), Batch: 2, Logger: logs.Logger(), Registerer: reg})
	require.NoError(t, err)
	got, err := c.Clean(ctx)
	require.NoError(t, err)
	// hourly: 7 old ticks go, its tick of a day ago stays; old-only keeps
	// its newest; recent keeps its one.
	require.Equal(t, map[string]int64{"ferry_periodic_tick": 8, "ferry_leader_term": 9, "ferry_telegram_malformed": 1}, got)

	var ticks []string
	rows, err := pool.Query(ctx, `SELECT schedule_id || '@' || (now() - tick_at > interval '40 days')::text FROM ferry_periodic_tick ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		ticks = append(ticks, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"hourly@false", "old-only@true", "recent@false"}, ticks)
	var keys []int64
	rows, err = pool.Query(ctx, `SELECT key FROM ferry_leader_term ORDER BY key`)
	require.NoError(t, err)
	for rows.Next() {
		var k int64
		require.NoError(t, rows.Scan(&k))
		keys = append(keys, k)
	}
	require.Equal(t, []int64{1, 2}, keys, "the newest term of each key stays, the old newest of key 2 too")
	var malformed int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_telegram_malformed`).Scan(&malformed))
	require.Equal(t, 1, malformed)

	require.InDelta(t, 8, testutil.ToFloat64(c.mDeleted.WithLabelValues("ferry_periodic_tick")), 0)
	require.Len(t, logs.All("retention: deleted"), 3, "a line per table")

	// A second pass finds nothing; a table kept forever is not touched.
	again, err := c.Clean(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"ferry_periodic_tick": 0, "ferry_leader_term": 0, "ferry_telegram_malformed": 0}, again)
	_, err = pool.Exec(ctx, `INSERT INTO ferry_telegram_malformed (bot, raw, error, received_at) VALUES ('b', 'z', 'e', now() - interval '400 days')`)
	require.NoError(t, err)
	forever, err := New(Config{Pool: pool, Tables: Tables(0, 0, -1)})
	require.NoError(t, err)
	got, err = forever.Clean(ctx)
	require.NoError(t, err)
	require.NotContains(t, got, "ferry_telegram_malformed")
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_telegram_malformed`).Scan(&malformed))
	require.Equal(t, 2, malformed)
}

func TestNew_BadConfig(t *testing.T) {
	t.Parallel()
	_, err := New(Config{Tables: []Table{{Name: "river_job", Keep: time.Hour}}})
	require.ErrorContains(t, err, `no retention for table "river_job"`)
	_, err = New(Config{Tables: Tables(time.Minute, 0, 0)})
	require.ErrorContains(t, err, "ferry_periodic_tick: keep 1m0s is under 1h0m0s")
}
