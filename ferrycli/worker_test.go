package ferrycli

import (
	"bytes"
	"encoding/base64"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/seal"
	"github.com/ferryq/ferry/telegram"
)

func TestWorkerOptions_addTo(t *testing.T) {
	t.Parallel()

	t.Run("Zero", func(t *testing.T) {
		t.Parallel()
		var cfg ferry.Config
		WorkerOptions{}.addTo(&cfg)
		require.Equal(t, ferry.Config{}, cfg)
	})

	t.Run("BesideWhatIsThere", func(t *testing.T) {
		t.Parallel()
		desk, ops := telegram.NewRouter(), telegram.NewRouter()
		cfg := ferry.Config{
			Kinds:     jobs.Builtin()[:1],
			Schedules: []periodic.Schedule{{ID: "a"}},
			Leader:    ferry.LeaderConfig{Runnables: []ferry.LeaderRunnable{{Name: "a"}}},
			Outbox:    ferry.OutboxConfig{Routes: []outbox.Route{{Name: "a"}}},
			Telegram:  ferry.TelegramConfig{Routers: map[string]*telegram.Router{"desk": desk}},
		}
		WorkerOptions{
			Kinds:           jobs.Builtin()[1:],
			Schedules:       []periodic.Schedule{{ID: "b"}},
			OutboxRoutes:    []outbox.Route{{Name: "b"}},
			TelegramRouters: map[string]*telegram.Router{"ops": ops},
			LeaderRunnables: []ferry.LeaderRunnable{{Name: "b"}},
		}.addTo(&cfg)
		var kinds []string
		for _, k := range cfg.Kinds {
			kinds = append(kinds, k.Name)
		}
		require.Equal(t, []string{"ferry.noop", "http.request"}, kinds)
		require.Equal(t, []periodic.Schedule{{ID: "a"}, {ID: "b"}}, cfg.Schedules)
		require.Equal(t, []outbox.Route{{Name: "a"}, {Name: "b"}}, cfg.Outbox.Routes)
		require.Equal(t, map[string]*telegram.Router{"desk": desk, "ops": ops}, cfg.Telegram.Routers)
		require.Equal(t, []ferry.LeaderRunnable{{Name: "a"}, {Name: "b"}}, cfg.Leader.Runnables)
	})

	t.Run("RoutersIntoANilMap", func(t *testing.T) {
		t.Parallel()
		ops := telegram.NewRouter()
		var cfg ferry.Config
		WorkerOptions{TelegramRouters: map[string]*telegram.Router{"ops": ops}}.addTo(&cfg)
		require.Equal(t, map[string]*telegram.Router{"ops": ops}, cfg.Telegram.Routers)
	})
}

// workerConfigOf runs a command with WorkerFlags on args and returns the
// Config that WorkerConfig reads from them. Its app has no help flag:
// urfave/cli's is one value for every app, which running apps in parallel
// would race on; the tests that call it do not run in parallel either.
func workerConfigOf(t *testing.T, args ...string) ferry.Config {
	t.Helper()
	var cfg ferry.Config
	app := &cli.App{Name: "w", HideHelp: true, Flags: WorkerFlags(), Action: func(c *cli.Context) (err error) {
		cfg, err = WorkerConfig(c)
		return err
	}}
	require.NoError(t, app.Run(append([]string{"w"}, args...)))
	return cfg
}

// TestWorkerConfig_EachFlagReachesItsField: every setting that ferry.Config
// declares is a flag of `worker run`, and what the flag says lands in the
// setting's field (a 0 of a retention keeps everything: -1).
func TestWorkerConfig_EachFlagReachesItsField(t *testing.T) {
	key := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	samples := map[string]string{
		"Database.URL": "postgres://u@h/db", "Database.SessionURL": "postgres://u@s/db", "Database.Pooler": "session",
		"Database.Schema": "tenant", "Queues.Workers": "a=3,b=4", "Admin.Addr": "127.0.0.1:1", "Admin.Token": "t",
		"Telegram.APIURL": "http://api", "Broadcast.Keys": key, "Seal.Keys": key, "ConfigFile": "f.yaml",
	}
	for _, s := range workerSettings() {
		if len(s.Flag) == 0 {
			continue
		}
		t.Run(s.Path, func(t *testing.T) {
			text, ok := samples[s.Path]
			switch {
			case ok:
			case s.Type == reflect.TypeFor[time.Duration]():
				text = "2h"
			case s.Type.Kind() == reflect.Bool:
				text = "true"
			case s.Type.Kind() == reflect.Int || s.Type.Kind() == reflect.Int64:
				text = "7"
			default:
				t.Fatalf("no sample for %s (%s)", s.Path, s.Type)
			}
			args := []string{"--" + s.Flag[0] + "=" + text}
			if s.Path != "Database.URL" {
				args = append(args, "--database-url", "postgres://u@h/db")
			}
			cfg := workerConfigOf(t, args...)
			var want ferry.Config
			require.NoError(t, s.SetText(&want, text))
			got := s.Field(&cfg)
			require.False(t, got.IsZero(), "the flag set nothing")
			if k, ok := got.Interface().(*seal.Keys); ok {
				// Its derived keys hold ciphers: compare the keys' ids.
				require.Equal(t, s.Field(&want).Interface().(*seal.Keys).IDs(), k.IDs())
				return
			}
			require.Equal(t, s.Field(&want).Interface(), got.Interface())
			if s.Type == reflect.TypeFor[time.Duration]() {
				require.Equal(t, int64(2*time.Hour), got.Int())
			}

			if s.KeepZero {
				cfg = workerConfigOf(t, "--"+s.Flag[0]+"=0", "--database-url", "postgres://u@h/db")
				require.Equal(t, int64(-1), s.Field(&cfg).Int(), "0 keeps everything")
			}
		})
	}
}

// TestWorkerConfig_UnsetStaysUnset: a setting given neither as a flag nor
// as a variable stays zero, for ferry.New's defaults, and an earlier
// variable name still works.
func TestWorkerConfig_UnsetStaysUnset(t *testing.T) {
	t.Setenv("FERRY_ELECTION_DATABASE_URL", "postgres://u@old/db")
	cfg := workerConfigOf(t, "--database-url", "postgres://u@h/db")
	require.Equal(t, "postgres://u@old/db", cfg.Database.SessionURL, "the variable's earlier name")
	cfg.Database = ferry.DatabaseConfig{}
	cfg.Logger = nil
	require.Equal(t, ferry.Config{}, cfg)
}
