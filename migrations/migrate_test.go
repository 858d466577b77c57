package migrations_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestAll(t *testing.T) {
	t.Parallel()
	all := migrations.All()
	require.NotEmpty(t, all)
	for i, m := range all {
		require.Equal(t, i+1, m.Version)
		require.NotEmpty(t, m.Up)
		require.NotEmpty(t, m.Down)
	}
}

func TestMigrator_UpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, false))
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)

	err = m.Check(ctx)
	require.ErrorIs(t, err, migrations.ErrSchemaBehind)
	var behind *migrations.BehindError
	require.ErrorAs(t, err, &behind)
	// One short line: the count and the first, not the whole list.
	require.Equal(t, fmt.Sprintf("database schema is behind this build: %d pending migrations, the first river/001 %s",
		len(behind.Pending), behind.Pending[0].Name), err.Error())
	require.Greater(t, len(behind.Pending), 30)

	applied, err := m.Up(ctx)
	require.NoError(t, err)
	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, applied, len(status))
	require.NoError(t, m.Check(ctx))

	again, err := m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, again, "a second up finds nothing to do")

	// One step down reverts ferry's newest migration only.
	one, err := m.Down(ctx, 1)
	require.NoError(t, err)
	require.Len(t, one, 1)
	require.Equal(t, migrations.LineFerry, one[0].Line)
	require.ErrorIs(t, m.Check(ctx), migrations.ErrSchemaBehind)

	rest, err := m.Down(ctx, -1)
	require.NoError(t, err)
	require.Len(t, rest, len(status)-1)
	var tables int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND (tablename LIKE 'river%' OR tablename LIKE 'ferry%')`).Scan(&tables))
	require.Zero(t, tables, "down --all leaves no river or ferry tables")

	applied, err = m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, applied, len(status))
	require.NoError(t, m.Check(ctx))
}

func TestMigrator_PoolOfOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The advisory lock lives on a connection of its own, so a pool of one
	// still has a connection for River's migrator (it used to deadlock).
	url := pgtest.NewDatabase(t, false)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	pool := pgtest.PoolFor(t, url+sep+"pool_max_conns=1")
	require.EqualValues(t, 1, pool.Config().MaxConns)
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.NoError(t, m.Check(ctx))
}

// TestRiverJobAutovacuum: migration 027 has autovacuum vacuum river_job
// by its dead rows whatever its size, and its down migration hands it
// back to the server's settings.
func TestRiverJobAutovacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, false))
	m, err := migrations.New(pool, nil)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	options := func() []string {
		var o []string
		require.NoError(t, pool.QueryRow(ctx, `SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'river_job'::regclass`).Scan(&o))
		return o
	}
	require.ElementsMatch(t, []string{"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_threshold=10000"}, options())

	down, err := m.Down(ctx, len(migrations.All())-26)
	require.NoError(t, err)
	require.Equal(t, 27, down[len(down)-1].Version)
	require.Empty(t, options())
}
