package redact

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestPostgresConnect: a connection refused twice (sslmode=prefer tries
// TLS, then plain) is said once, without pgconn's chain or the password.
func TestPostgresConnect(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close()) // nothing listens there now

	_, err = pgconn.Connect(context.Background(), fmt.Sprintf("postgres://ferry:s3cret@127.0.0.1:%d/ferry?sslmode=prefer", port))
	require.Error(t, err)
	require.Equal(t, 2, strings.Count(err.Error(), "connection refused"), "pgconn's own message: %s", err)
	require.Equal(t, "connection refused", PostgresConnect(err))

	require.Equal(t, "dial: password=xxxxx", PostgresConnect(fmt.Errorf("dial: password=s3cret")), "other errors: scrubbed as they are")
}
