// Package lease configures the sessions whose lifetime is a process's
// claim: the election's lock connection and a worker's liveness session.
// Such a session must end soon after its process stops answering, so the
// server and the client both keep TCP alive at the pace of the process's
// tick (idle a tick, then three probes a third of a tick apart), and a
// statement on it is bounded by the server too.
package lease

import (
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// connectTimeout bounds the dial and the start-up of a lease session.
const connectTimeout = 10 * time.Second

// Configure sets cc up as a lease session named appName: keepalives on
// both sides paced by tick (a second at least), statement_timeout on the
// server, and a bounded connect.
func Configure(cc *pgx.ConnConfig, appName string, tick, statementTimeout time.Duration) {
	keepIdle, keepInterval := keepalive(tick)
	cc.RuntimeParams["application_name"] = appName
	cc.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(keepIdle)
	cc.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(keepInterval)
	cc.RuntimeParams["tcp_keepalives_count"] = "3"
	cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(statementTimeout.Milliseconds(), 10)
	dialer := &net.Dialer{
		Timeout: connectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: time.Duration(keepIdle) * time.Second,
			Interval: time.Duration(keepInterval) * time.Second, Count: 3,
		},
	}
	cc.DialFunc = dialer.DialContext
	cc.ConnectTimeout = connectTimeout
}

// KeepaliveBound is how long after the last packet from its client the
// server gives a lease session up when its keepalive probes (Configure's,
// paced by tick) go unanswered: idle, then three probes an interval apart.
// With idle_session_timeout, it bounds how long a process cut off from
// the server stays alive in its eyes.
func KeepaliveBound(tick time.Duration) time.Duration {
	idle, interval := keepalive(tick)
	return time.Duration(idle+3*interval) * time.Second
}

// keepalive is Configure's pacing in whole seconds: idle a tick, probes a
// third of a tick apart, each a second at least.
func keepalive(tick time.Duration) (idle, interval int) {
	idle = max(1, int(tick.Seconds()))
	return idle, max(1, idle/3)
}
