package election

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
)

// TestElector_Partition: a leader cut off from Postgres by a network
// partition (every byte blackholed both ways, nothing closed: neither side
// sees a reset) is demoted by its own ownership check, which times out;
// the server ends its silent lock session after the lease; the standby
// takes the lock and, since its predecessor did not resign, defers a tick
// and its timeout before its runnables start. Never two holders, never two
// electors running runnables.
func TestElector_Partition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	u, err := url.Parse(b.url)
	require.NoError(t, err)
	px, err := netproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	u.Host = px.Addr()
	s := b.sample(t, KeyElection)

	logs := &logtest.Recorder{}
	cut := b.elector(t, func(c *Config) { c.DatabaseURL = u.String(); c.Logger = logs.Logger() })
	waitLeader(t, 5*time.Second, cut)
	standby := b.elector(t, nil)
	require.Eventually(t, func() bool { return standby.Status().State == StateStandby }, 5*time.Second, 10*time.Millisecond)

	cutPID := cut.Status().BackendPID
	require.NotZero(t, cutPID, "the leader's lock session")
	px.Partition()
	t0 := time.Now()
	require.Eventually(t, func() bool { return !cut.IsLeader() }, testTick+testTick/3+2*time.Second, 5*time.Millisecond,
		"the cut-off leader demotes itself")
	demoted := time.Since(t0)
	// The line comes once the runnables have returned, after IsLeader
	// turned false.
	require.Eventually(t, func() bool { return len(logs.All("election: demoted")) > 0 }, 5*time.Second, 5*time.Millisecond)
	rec := logs.Find(t, "election: demoted")
	require.Contains(t, rec["reason"], "ownership check timed out")

	lease := 3*testTick + testTick/3
	waitLeader(t, lease+testTick+testTick/3+5*time.Second, standby)
	took := time.Since(t0)
	t.Logf("demoted after %s, the standby led after %s (lease %s)", demoted.Round(time.Millisecond), took.Round(time.Millisecond), lease)
	// The standby led because the server ended the cut-off leader's lock
	// session (its lease), the one way the lock can go while nothing gets
	// through: that session is gone.
	var alive bool
	require.NoError(t, b.pool.QueryRow(context.Background(), "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", cutPID).Scan(&alive))
	require.False(t, alive, "the cut-off leader's lock session (pid %d) still lives: the lock went some other way, it was not cut off", cutPID)

	px.Heal()
	s.finish()
	require.EqualValues(t, 1, s.maxHolders.Load(), "never two holders of the lock")
	require.EqualValues(t, 1, s.maxActive.Load(), "never two electors running runnables")
}
