package e2e_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// embeddedPkg is the example of a service that runs ferry's worker in its
// own binary through ferrycli.WorkerMain.
const embeddedPkg = "./examples/embedded"

// TestEmbedded_SameCommandsFlagsAndKinds: the example binary migrates and
// runs as ferry's worker does, from the same FERRY_* environment, and works
// its own kind in its own queue; bad input exits 2 with one line.
func TestEmbedded_SameCommandsFlagsAndKinds(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)
	pool := pgtest.PoolFor(t, url)
	bin := proctest.Build(t, embeddedPkg)[embeddedPkg]

	stdout, stderr, code := proctest.Run(t, bin, env(url), nil, "migrate", "up")
	require.Zero(t, code, "embedded migrate up: %s", stderr)
	require.NotEmpty(t, stdout)

	help, _, code := proctest.Run(t, bin, nil, nil, "run", "--help")
	require.Zero(t, code)
	for _, name := range []string{"FERRY_QUEUES", "FERRY_CONFIG", "FERRY_ADMIN_ADDR", "FERRY_SHUTDOWN_GRACE", "DATABASE_URL"} {
		require.Contains(t, help, name)
	}
	_, stderr, code = proctest.Run(t, bin, env(url, "FERRY_QUEUES=greetings=zero"), nil, "run")
	require.Equal(t, 2, code, "a bad FERRY_QUEUES is bad input")
	require.Contains(t, oneLine(t, stderr), "greetings=zero")

	p := proctest.Start(t, bin, env(url, "FERRY_QUEUES=default=10,greetings=5", "FERRY_ADMIN_ADDR=off"), "run")
	_, err := p.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)

	// Its kind is published: the operator's enqueue knows it.
	id := enqueueID(t, url, "greet.send", "--args", `{"name":"Ada"}`)
	j := waitJobState(t, pool, id, "completed", 10*time.Second)
	require.Equal(t, "greetings", j.Queue, "the kind's own queue")
	_, err = p.WaitForLine(5*time.Second, "greet: sent")
	require.NoError(t, err)
	bad := enqueueID(t, url, "greet.send", "--args", `{}`)
	waitJobState(t, pool, bad, "cancelled", 10*time.Second)

	stop(t, p, 30*time.Second)
}
