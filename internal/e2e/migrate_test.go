package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// migration is one entry of `worker migrate status --json` and of the
// lists `up --json` and `down --json` print.
type migration struct {
	Line    string `json:"line"`
	Version int    `json:"version"`
	Name    string `json:"name"`
	Applied bool   `json:"applied"`
}

func (m migration) id() string { return fmt.Sprintf("%s/%03d", m.Line, m.Version) }

func decodeMigrations(t *testing.T, s string) []migration {
	t.Helper()
	var ms []migration
	require.NoError(t, json.Unmarshal([]byte(s), &ms), "not a JSON list of migrations: %q", s)
	return ms
}

// status returns `worker migrate status --json`.
func status(t *testing.T, url string) []migration {
	t.Helper()
	ms := decodeMigrations(t, migrate(t, url, "status", "--json"))
	require.NotEmpty(t, ms)
	return ms
}

func requireAllApplied(t *testing.T, ms []migration, want bool) {
	t.Helper()
	for _, m := range ms {
		require.Equal(t, want, m.Applied, "%s applied", m.id())
	}
}

// ferryTables counts the river_* and ferry_* tables.
func ferryTables(t *testing.T, url string) int {
	t.Helper()
	var n int
	err := pgtest.PoolFor(t, url).QueryRow(context.Background(), `
		SELECT count(*) FROM pg_tables
		WHERE schemaname = current_schema() AND (tablename LIKE 'river\_%' OR tablename LIKE 'ferry\_%')`).Scan(&n)
	require.NoError(t, err)
	return n
}

func TestMigrate_UpDownUp(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)

	before := status(t, url)
	requireAllApplied(t, before, false)
	require.Equal(t, "river", before[0].Line, "River's migrations come first")
	require.Equal(t, "ferry", before[len(before)-1].Line, "ferry's come last")

	up := decodeMigrations(t, migrate(t, url, "up", "--json"))
	require.Len(t, up, len(before), "up applies every migration")
	requireAllApplied(t, status(t, url), true)

	down := decodeMigrations(t, migrate(t, url, "down", "--all", "--json"))
	require.Len(t, down, len(before), "down --all reverts every migration")
	require.Equal(t, "ferry", down[0].Line, "ferry's are reverted first")
	requireAllApplied(t, status(t, url), false)
	require.Zero(t, ferryTables(t, url), "down --all leaves no river_ or ferry_ tables")

	up = decodeMigrations(t, migrate(t, url, "up", "--json"))
	require.Len(t, up, len(before))
	requireAllApplied(t, status(t, url), true)

	again := decodeMigrations(t, migrate(t, url, "up", "--json"))
	require.Empty(t, again, "a second up has nothing to do")
	require.Equal(t, "nothing to do\n", migrate(t, url, "up"))
}

func TestMigrate_ConcurrentUp(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)
	b := bins(t)

	// Both start before either can finish: they take turns on the advisory
	// lock, and the second finds nothing left to do.
	procs := []*proctest.Proc{
		proctest.Start(t, b.worker, env(url), "migrate", "up", "--json"),
		proctest.Start(t, b.worker, env(url), "migrate", "up", "--json"),
	}
	appliedBy := map[string]int{}
	for _, p := range procs {
		code, err := p.Wait(30 * time.Second)
		require.NoError(t, err)
		require.Zero(t, code, "%s: %s", p, p.Stderr())
		require.Empty(t, p.Stderr())
		for _, m := range decodeMigrations(t, p.Stdout()) {
			appliedBy[m.id()]++
		}
	}

	all := status(t, url)
	requireAllApplied(t, all, true)
	require.Len(t, appliedBy, len(all), "between them the two runs applied every migration")
	for id, n := range appliedBy {
		require.Equal(t, 1, n, "%s applied by both runs", id)
	}

	// The tables agree: one row per migration.
	var riverWant, ferryWant int
	for _, m := range all {
		if m.Line == "river" {
			riverWant++
		} else {
			ferryWant++
		}
	}
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	var rows, versions int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT version) FROM ferry_migration").Scan(&rows, &versions))
	require.Equal(t, ferryWant, rows)
	require.Equal(t, ferryWant, versions)
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT (line, version)) FROM river_migration").Scan(&rows, &versions))
	require.Equal(t, riverWant, rows)
	require.Equal(t, riverWant, versions)
}

func TestRun_StaleSchema(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)

	stdout, stderr, code := proctest.Run(t, bins(t).worker, env(url), nil, "run", "--admin-addr", "off")
	require.Equal(t, 1, code, "a schema behind the build is a failure, not bad input")
	require.Empty(t, stdout)
	line := oneLine(t, stderr)
	require.True(t, strings.HasPrefix(line, "worker: "), line)
	require.Contains(t, line, "worker migrate up")
	require.Zero(t, ferryTables(t, url), "run without --migrate changes nothing")
}

func TestRun_Migrate(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)

	p := startWorker(t, url, nil, "--migrate")
	requireAllApplied(t, status(t, url), true)
	stop(t, p, stopTimeout)
	_, err := p.WaitForLineFunc(0, logtest.Logged("ferry: stopped"))
	require.NoError(t, err)
}
