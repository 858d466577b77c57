package scratchdb_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/base/scratchdb"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// exists reports whether the server has a database named name.
func exists(t *testing.T, name string) bool {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.ServerURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok))
	return ok
}

// tables returns the tables of the database at url, of any schema but the
// system's.
func tables(t *testing.T, url string) []string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables
		WHERE table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1`)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func TestNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Migrated", func(t *testing.T) {
		t.Parallel()
		url, drop, err := scratchdb.New(ctx, pgtest.ServerURL(), true)
		require.NoError(t, err)
		name := dburl.Database(url)
		require.True(t, strings.HasPrefix(name, "ferry_test_scratchdb_"), name)
		require.Subset(t, tables(t, url), []string{"ferry_outbox", "river_job", "river_migration"})

		require.NoError(t, drop())
		require.False(t, exists(t, name), "dropped")
		require.NoError(t, drop(), "a second drop is a no-op")
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		url, drop, err := scratchdb.New(ctx, pgtest.ServerURL(), false)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, drop()) })
		require.Empty(t, tables(t, url))
	})

	t.Run("NamesDiffer", func(t *testing.T) {
		t.Parallel()
		a, dropA, err := scratchdb.New(ctx, pgtest.ServerURL(), true)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, dropA()) })
		b, dropB, err := scratchdb.New(ctx, pgtest.ServerURL(), true)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, dropB()) })
		require.NotEqual(t, dburl.Database(a), dburl.Database(b))
	})

	t.Run("Unreachable", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		_, _, err = scratchdb.New(ctx, fmt.Sprintf("postgres://ferry:secret@%s/ferry?sslmode=disable", addr), true)
		require.ErrorIs(t, err, scratchdb.ErrUnreachable)
		require.NotContains(t, err.Error(), "secret")
	})
}

// TestNew_TemplateDroppedUnderIt: a run of a checkout with other
// migrations drops this one's template as stale between its check and its
// clone; New builds it again and clones it.
func TestNew_TemplateDroppedUnderIt(t *testing.T) {
	// Not parallel: the hook is the package's.
	ctx := context.Background()
	drops := 0
	scratchdb.SetBeforeClone(func(tmpl string) {
		if drops > 0 {
			return
		}
		drops++
		conn, err := pgx.Connect(ctx, pgtest.ServerURL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{tmpl}.Sanitize()+" WITH (FORCE)")
		require.NoError(t, err)
	})
	t.Cleanup(func() { scratchdb.SetBeforeClone(nil) })

	url, drop, err := scratchdb.New(ctx, pgtest.ServerURL(), true)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, drop()) })
	require.Equal(t, 1, drops, "the template was dropped under it once")
	require.Contains(t, tables(t, url), "ferry_migration", "a clone of the template built again")
}
