package lockoracle_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/lockoracle"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// TestFencingOracle checks package locks (its test lives here, in the
// module of the process harness: package locks is a module of its own that
// links only River and pgx). Real contender processes take one lock in
// turns while holders are killed (kill -9) and their sessions terminated:
// no write fenced by an
// older token commits after a newer one, and the lock is taken again after
// every kill (its ttl frees it). The bench runs the same with 16 processes
// and 10,000 acquisitions (go run ./tools/bench -mode locks).
func TestFencingOracle(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, "./internal/testkit/lockoracle/contender")["./internal/testkit/lockoracle/contender"]
	res, err := lockoracle.Run(context.Background(), lockoracle.Config{
		Bin: bin, URL: pgtest.NewDatabase(t, true),
		Procs: 4, Acquisitions: 300, TTL: time.Second, Kills: 2, Terminates: 2,
		Timeout: 3 * time.Minute,
	})
	require.NoError(t, err)
	t.Logf("%+v", res)
	require.Zero(t, res.Overlaps)
	require.Greater(t, res.FencedWrites, 300)
	require.Equal(t, 2, res.Kills)
	require.Equal(t, 2, res.Terminates)
	require.Len(t, res.KillNextMS, 2, "a newer holder wrote after each kill")
	require.Len(t, res.KillFreeMS, 2)
	for _, free := range res.KillFreeMS {
		// The lease's expiry by the database's clock: at most a ttl after
		// the holder's last write, which came before the kill. Later would
		// be a renewal after the kill.
		require.LessOrEqual(t, free, float64(time.Second.Milliseconds()), "a killed holder's lock is free within its ttl")
	}
	require.Positive(t, res.Handovers)
}
