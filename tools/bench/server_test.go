package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestServerSettings: the results record the server's settings that shape
// the figures, read from a real server; a server that cannot be read is an
// error, not an empty record.
func TestServerSettings(t *testing.T) {
	got, err := serverSettings(t.Context(), pgtest.ServerURL())
	require.NoError(t, err)
	for _, name := range []string{"server_version", "autovacuum", "synchronous_commit", "fsync", "shared_buffers", "max_connections"} {
		require.NotEmpty(t, got[name], name)
	}
	require.Contains(t, []string{"on", "off"}, got["autovacuum"])

	_, err = serverSettings(t.Context(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
}

// TestServerActivity: the server's counters are read from this server's
// version's views (a server that cannot be read is an error), and a
// run's are the difference of two readings.
func TestServerActivity(t *testing.T) {
	pool := pgtest.Pool(t)
	before, err := readServerActivity(t.Context(), pool)
	require.NoError(t, err)
	require.NotEmpty(t, before.SharedBuffers)
	require.GreaterOrEqual(t, before.CheckpointsTimed+before.CheckpointsReq, int64(0))
	after := before
	after.CheckpointsReq += 2
	after.BuffersBackend += 5
	require.Equal(t, serverActivity{SharedBuffers: before.SharedBuffers, CheckpointsReq: 2, BuffersBackend: 5}, after.since(before))

	pool.Close()
	_, err = readServerActivity(t.Context(), pool)
	require.Error(t, err)
}
