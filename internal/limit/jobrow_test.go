package limit

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// A claim returns its jobs as River's driver reads them (JobGetByIDMany),
// every field: when River reads a row differently, this fails and the
// claim's scan must follow.
func TestClaim_RowsAsRiverReadsThem(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := context.Background()
	l, err := New(Config{Pool: pool, Limits: []Limit{{Name: "c", Kind: "limit.test", Concurrency: 10}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	_, err = pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, priority, attempt, attempted_by,
			errors, metadata, tags, unique_key, unique_states)
		VALUES ('{"tenant": "a"}', 'limit.test', 7, 'default', 'available', 2, 1, ARRAY['earlier'],
			ARRAY['{"at": "2026-12-01T10:00:00.123456Z", "attempt": 1, "error": "boom", "trace": "at line 1"}'::jsonb],
			'{"k": "v"}', ARRAY['t1', 't2'], '\x0102'::bytea, B'11110101'),
		('{"tenant": "b"}', 'limit.test', 25, 'default', 'available', 1, 0, NULL, '{}', '{}', '{}', NULL, NULL)`)
	require.NoError(t, err)
	exec := riverpgxv5.New(pool).GetExecutor()
	claimed, err := l.Claim(ctx, exec, &riverdriver.JobGetAvailableParams{
		ClientID: "rows-test", MaxAttemptedBy: 100, MaxToLock: 10, Queue: "default", Now: ptrTime(time.Now()),
	})
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	ids := []int64{claimed[0].ID, claimed[1].ID}
	river, err := exec.JobGetByIDMany(ctx, &riverdriver.JobGetByIDManyParams{ID: ids})
	require.NoError(t, err)
	slices.SortFunc(claimed, func(a, b *rivertype.JobRow) int { return int(a.ID - b.ID) })
	require.Equal(t, river, claimed)
}

func ptrTime(t time.Time) *time.Time { return &t }
