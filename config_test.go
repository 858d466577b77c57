package ferry

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/outbox"
)

func TestParseQueues(t *testing.T) {
	t.Parallel()
	got, err := ParseQueues(" default=10, outbox=20 ,")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"default": 10, "outbox": 20}, got)

	for in, wantErr := range map[string]string{
		"":                    "names no queue",
		"default":             "is not name=workers",
		"default=x":           "whole number",
		"default=0":           "not between 1 and 10000",
		"default=10001":       "not between 1 and 10000",
		"Default=1":           "lowercase",
		"a__b=1":              "lowercase",
		"default=1,default=2": "listed twice",
		"=3":                  "lowercase",
	} {
		_, err := ParseQueues(in)
		require.ErrorContains(t, err, wantErr, "input %q", in)
	}
}

func TestConfig_WithDefaults(t *testing.T) {
	t.Parallel()
	c := Config{Database: DatabaseConfig{URL: "postgres://x@127.0.0.1/x"}}.WithDefaults()
	require.Equal(t, QueueWorkers{"default": 1000, "outbox": 50}, c.Queues.Workers)
	require.Equal(t, DefaultFetchCooldown, c.Queues.FetchCooldown)
	require.Equal(t, DefaultFetchPollInterval, c.Queues.FetchPollInterval)
	require.Equal(t, DefaultShutdownGrace, c.Queues.ShutdownGrace)
	require.Equal(t, DefaultAdminAddr, c.Admin.Addr)
	require.NotEmpty(t, c.Version)
	require.NotNil(t, c.Logger)
	require.NoError(t, c.validate())

	set := Config{Queues: QueuesConfig{FetchCooldown: time.Second}}.WithDefaults()
	require.Equal(t, time.Second, set.Queues.FetchCooldown, "a set value is kept")
}

func TestConfig_Validate(t *testing.T) {
	t.Parallel()
	base := Config{Database: DatabaseConfig{URL: "postgres://x@127.0.0.1/x"}}.WithDefaults()
	for name, tc := range map[string]struct {
		mod  func(*Config)
		want string
	}{
		"no database": {func(c *Config) { c.Database.URL = "" }, "DATABASE_URL"},
		"poll under cooldown": {func(c *Config) {
			c.Queues.FetchCooldown, c.Queues.FetchPollInterval = 5*time.Millisecond, 2*time.Millisecond
		}, "below the fetch cooldown"},
		"cooldown too small":  {func(c *Config) { c.Queues.FetchCooldown = time.Microsecond }, "below River's minimum"},
		"negative grace":      {func(c *Config) { c.Queues.ShutdownGrace = -time.Second }, "negative"},
		"bad queue":           {func(c *Config) { c.Queues.Workers = map[string]int{"BAD": 1} }, "lowercase"},
		"no queues":           {func(c *Config) { c.Queues.Workers = map[string]int{} }, "at least one queue"},
		"negative max length": {func(c *Config) { c.Queues.MaxLength = -1 }, "queue max length -1 is negative"},
		"negative bound":      {func(c *Config) { c.Queues.MaxLengths = map[string]int64{"reports": -5} }, `queue "reports": max length -5 is negative`},
		"settle too soon":     {func(c *Config) { c.Liveness.SettleAfter = time.Millisecond }, "settle after 1ms is under 1s"},
		"tick retention":      {func(c *Config) { c.Retention.Ticks = time.Minute }, "tick retention 1m0s is under 1h (0 keeps everything)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := base
			tc.mod(&c)
			require.ErrorContains(t, c.validate(), tc.want)
		})
	}
}

func TestRouteWorkers(t *testing.T) {
	t.Parallel()
	handle := func(context.Context, pgx.Tx, outbox.Message) error { return nil }
	for name, tc := range map[string]struct {
		route        outbox.Route
		outbox, want int
	}{
		"WebhookTakesTheOutboxCount":    {outbox.Route{URL: "http://x/"}, 50, 50},
		"WebhookBeyondTheHandlerCap":    {outbox.Route{URL: "http://x/"}, 200, 200},
		"HandlerAtMostTheDefault":       {outbox.Route{Handler: handle}, 50, DefaultHandlerRouteWorkers},
		"HandlerFewerWhenOutboxIsFewer": {outbox.Route{Handler: handle}, 5, 5},
		"RouteWorkersWinForAWebhook":    {outbox.Route{URL: "http://x/", Workers: 3}, 50, 3},
		"RouteWorkersWinForAHandler":    {outbox.Route{Handler: handle, Workers: 64}, 50, 64},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, RouteWorkers(tc.route, tc.outbox))
		})
	}
}
