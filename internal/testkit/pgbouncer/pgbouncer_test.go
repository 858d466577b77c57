package pgbouncer_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/pgbouncer"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Two clients taking turns run on one server session: PgBouncer pools by
// transaction (in session mode each client would keep a session of its
// own), so session state does not follow a client.
func TestStart_TransactionMode(t *testing.T) {
	ctx := context.Background()
	url := pgbouncer.Start(t, pgtest.URL(t))
	connect := func() *pgx.Conn {
		cfg, err := pgx.ParseConfig(url)
		require.NoError(t, err)
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
		c, err := pgx.ConnectConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close(ctx) })
		return c
	}
	a, b := connect(), connect()
	var pa, pb int
	var setting *string
	require.NoError(t, a.QueryRow(ctx, "SELECT pg_backend_pid(), set_config('ferry.test', 'a', false)").Scan(&pa, new(string)))
	require.NoError(t, b.QueryRow(ctx, "SELECT pg_backend_pid(), current_setting('ferry.test', true)").Scan(&pb, &setting))
	require.Equal(t, pa, pb, "b ran on a's server session")
	require.NotNil(t, setting)
	require.Equal(t, "a", *setting, "a's session setting is what b sees: state does not follow the client")
}
