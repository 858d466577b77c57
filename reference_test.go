package ferry_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/ferrycli"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/config"
	"github.com/ferryq/ferry/internal/refdoc"
	"github.com/ferryq/ferry/internal/settings"
	"github.com/ferryq/ferry/internal/testkit/telegramtest"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/seal"
)

// update rewrites the generated references instead of comparing them:
// go test -run TestReference -args -update (go tool task docs).
var update = flag.Bool("update", false, "rewrite docs/configuration.md, docs/cli.md and docs/metrics.md from the code")

// checkPage compares the generated page with the committed file, or writes
// it with -update.
func checkPage(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "%s is missing: run %s", path, refdoc.Command)
	require.Equal(t, string(want), got, "%s differs from what the code declares: run %s", path, refdoc.Command)
}

// TestReference_Configuration: docs/configuration.md has every setting,
// flag and config-file key the code declares, and no other.
func TestReference_Configuration(t *testing.T) {
	t.Parallel()
	page, err := refdoc.Configuration(settings.Of(ferry.Config{}.WithDefaults()), ferrycli.WorkerFlags(),
		reflect.TypeFor[config.File](), ferrycli.EnqueueApp())
	require.NoError(t, err)
	checkPage(t, filepath.Join("docs", "configuration.md"), page)
}

// TestReference_CLI: docs/cli.md is the help of every command of enqueue
// and worker.
func TestReference_CLI(t *testing.T) {
	t.Parallel()
	page, err := refdoc.CLI(ferrycli.EnqueueApp, func() *cli.App { return ferrycli.WorkerApp(ferrycli.WorkerOptions{}) })
	require.NoError(t, err)
	checkPage(t, filepath.Join("docs", "cli.md"), page)
}

// referenceConfigFile turns on every capability that registers metrics of
// its own: a schedule (ticking every second, so that its last tick's age
// has a value), a bounded queue, a limit, an outbox route and a Telegram
// bot (of a fake Bot API that has an update for it).
const referenceConfigFile = `
schedules:
  - {id: docs-tick, every: 1s, kind: ferry.noop}
queues:
  - {name: default, max_length: 1000}
limits:
  - {kind: ferry.noop, concurrency: 1}
outbox:
  routes:
    - {topic: docs.ping, name: docs, url: "http://127.0.0.1:1/"}
telegram:
  bots:
    - {name: docs, token_env: FERRY_REFERENCE_TEST_BOT_TOKEN}
`

// TestReference_Metrics: docs/metrics.md lists every metric a server with
// every capability on registers, with its labels. A collector that reads
// the database reports a metric only for the rows it finds, and a metric's
// type only shows in a value: the server runs until each has one (a tick,
// an outbox delivery, a Telegram update stored), and the metrics are read
// once, then.
//
// Not parallel: it sets the bot's token variable.
func TestReference_Metrics(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	file := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(file, []byte(referenceConfigFile), 0o600))
	t.Setenv("FERRY_REFERENCE_TEST_BOT_TOKEN", "123:docs")
	api := telegramtest.NewBotAPI(t, "123:docs")
	api.Push(`{"update_id":1,"message":{"message_id":1,"date":1700000000,"chat":{"id":42,"type":"private"},"text":"hi"}}`)
	keys, err := seal.ParseKeys("MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIzNDU2Nzg5MDE=")
	require.NoError(t, err)
	cfg := quietConfig(url)
	cfg.ConfigFile = file
	cfg.Seal.Keys = keys
	cfg.Telegram.APIURL = api.URL()
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)

	pool := pgtest.PoolFor(t, url)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = outbox.Add(ctx, tx, "docs.ping", map[string]int{"n": 1})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Eventually(t, func() bool {
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM ferry_outbox_delivery)
			AND EXISTS (SELECT FROM ferry_schedule WHERE last_tick_at IS NOT NULL)
			AND EXISTS (SELECT FROM ferry_outbox WHERE topic = 'telegram.docs')`).Scan(&ok))
		return ok
	}, 20*time.Second, 20*time.Millisecond, "no outbox delivery, schedule tick or Telegram update")

	families, err := srv.MetricsForTest().Families("go_", "process_")
	require.NoError(t, err)
	require.NoError(t, stop())
	checkPage(t, filepath.Join("docs", "metrics.md"), refdoc.Metrics(families))
}
