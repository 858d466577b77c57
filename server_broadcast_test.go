package ferry_test

import (
	"context"
	"crypto/rand"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
)

func TestServer_Broadcast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// wait bounds each wait for an event: a watchdog, not a measurement.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	url := pgtest.NewDatabase(t, true)
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	// Pool settings in the URL are the pool's: the LISTEN session drops them.
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	cfg := quietConfig(url + sep + "pool_max_conns=5")
	cfg.Broadcast.Keys = broadcast.Keys{key}
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	sub, err := srv.Broadcast().Subscribe(wait, admin.EventsChannel, "test")
	require.NoError(t, err)
	runServer(t, srv)

	// The leader announces itself to the consoles (its console watch may
	// tell them of a changed page first).
	ev, err := sub.Next(wait)
	for ; err == nil && strings.Contains(string(ev.Data), `"changed"`); ev, err = sub.Next(wait) {
	}
	require.NoError(t, err)
	require.Equal(t, admin.EventsChannel, ev.Channel)
	require.Contains(t, string(ev.Data), `"leader":"acquired"`)

	// A message not signed with the server's keys is dropped and counted.
	_, err = srv.Pool().Exec(ctx, `SELECT pg_notify('ferry_broadcast', '{"c":"test","t":1,"d":"forged","s":"AAAA"}')`)
	require.NoError(t, err)
	// A genuine message, captured off the channel and NOTIFYed again, is
	// delivered once and the copy counted.
	conn, err := srv.Pool().Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "LISTEN ferry_broadcast")
	require.NoError(t, err)
	require.NoError(t, srv.Broadcast().Publish(ctx, "test", "captured"))
	n, err := conn.Conn().WaitForNotification(wait)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "UNLISTEN *")
	require.NoError(t, err)
	conn.Release()
	_, err = srv.Pool().Exec(ctx, `SELECT pg_notify('ferry_broadcast', $1)`, n.Payload)
	require.NoError(t, err)
	require.NoError(t, srv.Broadcast().Publish(ctx, "test", "fence"))
	for _, want := range []string{`"captured"`, `"fence"`} {
		for ev, err = sub.Next(wait); err == nil && ev.Channel != "test"; ev, err = sub.Next(wait) {
		}
		require.NoError(t, err)
		require.Equal(t, want, string(ev.Data))
	}
	body := httpGet(t, "http://"+srv.AdminAddr()+"/metrics")
	require.Contains(t, body, `ferry_broadcast_dropped_total{reason="forged"} 1`)
	require.Contains(t, body, `ferry_broadcast_dropped_total{reason="unsigned"} 0`)
	require.Contains(t, body, `ferry_broadcast_dropped_total{reason="replayed"} 1`)
	require.Contains(t, body, `ferry_broadcast_dropped_total{reason="stale"} 0`)

	// A delivery that becomes stuck, written by whoever: the leader's watch
	// announces it to the consoles.
	_, err = srv.Pool().Exec(ctx, `WITH m AS (INSERT INTO ferry_outbox (topic, payload, status) VALUES ('order.placed', '{}', 'relayed') RETURNING id)
		INSERT INTO ferry_outbox_delivery (message_id, route, status) SELECT id, 'billing', 'stuck' FROM m`)
	require.NoError(t, err)
	for {
		ev, err = sub.Next(wait)
		require.NoError(t, err)
		if string(ev.Data) == `{"changed":"outbox_stuck"}` {
			break
		}
		require.Equal(t, admin.EventsChannel, ev.Channel, "nothing else on the test channel: %s", ev.Data)
	}
}

// A leader demoted because the database went out of reach (a partition:
// its ownership check times out) does not wait for its announcement that
// it let the lead go, which cannot land: "election: demoted" is logged
// before the announcement gives up, not after.
func TestServer_DemotionDoesNotWaitForItsAnnouncement(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t, true)
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	px, err := netproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	u.Host = px.Addr()
	logs := &logtest.Recorder{}
	cfg := quietConfig(u.String())
	cfg.Logger = logs.Logger()
	cfg.Leader.Tick = time.Second
	srv, err := ferry.New(context.Background(), cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)
	require.Eventually(t, func() bool { return len(logs.All("election: runnables started")) == 1 }, 30*time.Second, 10*time.Millisecond)

	px.Partition()
	require.Eventually(t, func() bool { return len(logs.All("broadcast: leader release not announced")) == 1 }, 30*time.Second, 10*time.Millisecond)
	out := logs.String()
	demoted := strings.Index(out, `"msg":"election: demoted"`)
	gaveUp := strings.Index(out, `"msg":"broadcast: leader release not announced"`)
	require.GreaterOrEqual(t, demoted, 0, "demoted")
	require.Less(t, demoted, gaveUp, "the demotion waited for the announcement")
	px.Heal()
	_ = stop()
}
