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
