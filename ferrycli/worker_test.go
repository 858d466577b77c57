package ferrycli

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
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
			Kinds:           jobs.Builtin()[:1],
			Schedules:       []periodic.Schedule{{ID: "a"}},
			OutboxRoutes:    []outbox.Route{{Name: "a"}},
			TelegramRouters: map[string]*telegram.Router{"desk": desk},
			LeaderRunnables: []ferry.LeaderRunnable{{Name: "a"}},
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
		require.Equal(t, []outbox.Route{{Name: "a"}, {Name: "b"}}, cfg.OutboxRoutes)
		require.Equal(t, map[string]*telegram.Router{"desk": desk, "ops": ops}, cfg.TelegramRouters)
		require.Equal(t, []ferry.LeaderRunnable{{Name: "a"}, {Name: "b"}}, cfg.LeaderRunnables)
	})

	t.Run("RoutersIntoANilMap", func(t *testing.T) {
		t.Parallel()
		ops := telegram.NewRouter()
		var cfg ferry.Config
		WorkerOptions{TelegramRouters: map[string]*telegram.Router{"ops": ops}}.addTo(&cfg)
		require.Equal(t, map[string]*telegram.Router{"ops": ops}, cfg.TelegramRouters)
	})
}
