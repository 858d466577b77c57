package lockoracle

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The oracle sees an overlap: a row whose token is smaller than one
// written before it.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	_, err := pool.Exec(ctx, `CREATE TABLE lock_oracle (
		seq bigserial PRIMARY KEY, token bigint NOT NULL, pid int NOT NULL, kind text NOT NULL,
		at timestamptz NOT NULL DEFAULT clock_timestamp());
		INSERT INTO lock_oracle (token, pid, kind, at) VALUES
		(1, 10, 'acq', '2026-01-01 00:00:00'), (1, 10, 'rel', '2026-01-01 00:00:01'), (1, 10, 'released', '2026-01-01 00:00:01.002'),
		(2, 11, 'acq', '2026-01-01 00:00:01.005'), (1, 10, 'rel', '2026-01-01 00:00:01.006'), (2, 11, 'rel', '2026-01-01 00:00:02')`)
	require.NoError(t, err)
	var res Result
	require.NoError(t, check(ctx, pool, &res))
	require.Equal(t, 1, res.Overlaps, "token 1 written after token 2")
	require.Equal(t, 5, res.FencedWrites)
	require.Equal(t, 1, res.Handovers)
	require.InDelta(t, 5, res.HandoverP99MS, 0.001, "token 1's rel to token 2's acq")
}
