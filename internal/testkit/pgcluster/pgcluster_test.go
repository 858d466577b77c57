package pgcluster_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/pgcluster"
)

// TestReplicated_Failover: a commit the primary acknowledged is on the
// standby (synchronous replication), and after the primary crashes and
// the standby is promoted, a multi-host URL with
// target_session_attrs=read-write reaches the new primary and finds it.
func TestReplicated_Failover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, standby, err := pgcluster.StartReplicated()
	require.NoError(t, err)
	t.Cleanup(primary.Stop)
	t.Cleanup(standby.Stop)

	url, err := pgcluster.MultiHostURL(primary.URL("postgres"), primary, standby)
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	var port int
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port))
	require.Equal(t, primary.Port, port, "the multi-host URL reaches the primary")
	var sync string
	require.NoError(t, conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1", pgcluster.StandbyName).Scan(&sync))
	require.Equal(t, "sync", sync)
	_, err = conn.Exec(ctx, "CREATE TABLE acked (id int PRIMARY KEY); INSERT INTO acked VALUES (1)")
	require.NoError(t, err)
	conn.Close(ctx)

	require.NoError(t, primary.Crash())
	require.NoError(t, standby.Promote())
	conn, err = pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port))
	require.Equal(t, standby.Port, port, "after the failover the URL reaches the promoted standby")
	var n int
	require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM acked").Scan(&n))
	require.Equal(t, 1, n, "the acknowledged commit survived the failover")
	_, err = conn.Exec(ctx, "INSERT INTO acked VALUES (2)")
	require.NoError(t, err, "the new primary takes writes")
}

// TestStartReplicated_FromADirectoryPostgresCannotEnter: a test whose
// working directory the postgres user may not enter (a clone under a home
// of mode 700) still gets its replicated pair: the commands run as postgres
// start elsewhere, and only their standard output is read.
func TestStartReplicated_FromADirectoryPostgresCannotEnter(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o700))
	t.Chdir(dir)
	primary, standby, err := pgcluster.StartReplicated()
	require.NoError(t, err)
	t.Cleanup(primary.Stop)
	t.Cleanup(standby.Stop)
}
