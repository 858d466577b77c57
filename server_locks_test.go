package ferry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/locks"
)

// The server's lock client reports its locks in /metrics, and the admin
// console lists them.
func TestServer_Locks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := ferry.New(ctx, quietConfig(pgtest.NewDatabase(t, true)))
	require.NoError(t, err)
	stop := runServer(t, srv)
	metricsURL := "http://" + srv.AdminAddr() + "/metrics"

	l, err := srv.Locks().Acquire(ctx, "nightly-report", locks.Options{TTL: time.Minute})
	require.NoError(t, err)
	m := httpGet(t, metricsURL)
	require.Contains(t, m, `ferry_locks_held{name="nightly-report"} 1`)
	require.Contains(t, m, `ferry_lock_acquisitions_total{name="nightly-report"} 1`)
	// The console lists it, from ferry_lock.
	api := httpGet(t, "http://"+srv.AdminAddr()+"/admin/api/locks")
	require.Contains(t, api, `"name":"nightly-report"`)
	require.Contains(t, api, fmt.Sprintf(`"token":%d`, l.Token()))

	require.NoError(t, l.Release(ctx))
	m = httpGet(t, metricsURL)
	require.Contains(t, m, `ferry_locks_held{name="nightly-report"} 0`)

	// A loss: another holder took the lock; the next renewal finds out.
	l, err = srv.Locks().Acquire(ctx, "nightly-report", locks.Options{TTL: 300 * time.Millisecond})
	require.NoError(t, err)
	_, err = srv.Pool().Exec(ctx, `UPDATE ferry_lock SET token = token + 1 WHERE name = 'nightly-report'`)
	require.NoError(t, err)
	<-l.Lost()
	m = httpGet(t, metricsURL)
	require.Contains(t, m, `ferry_lock_losses_total{name="nightly-report"} 1`)
	require.Contains(t, m, `ferry_locks_held{name="nightly-report"} 0`)
	require.Contains(t, m, `ferry_lock_acquisitions_total{name="nightly-report"} 2`)
	require.NoError(t, stop())
}
