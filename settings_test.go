package ferry

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/settings"
	"github.com/ferryq/ferry/seal"
)

// TestSettings_NamesAreTheContract: the environment variables, flags and
// config-file keys that Config's fields declare are the ones operators
// set (docs/configuration.md, DESIGN.md), each once. A renamed, lost or added one fails
// here first: change this list only with the docs.
func TestSettings_NamesAreTheContract(t *testing.T) {
	t.Parallel()
	var got []string
	for _, s := range settings.Of(Config{}.WithDefaults()) {
		got = append(got, s.Path+" "+strings.Join(s.Env, ",")+" "+strings.Join(s.Flag, ",")+" "+s.File)
	}
	require.Equal(t, []string{
		"ConfigFile FERRY_CONFIG config ",
		"Database.URL DATABASE_URL database-url ",
		"Database.SessionURL FERRY_SESSION_DATABASE_URL,FERRY_ELECTION_DATABASE_URL session-database-url,election-database-url ",
		"Database.Pooler FERRY_POOLER pooler ",
		"Database.Schema FERRY_SCHEMA schema ",
		"Database.Migrate FERRY_MIGRATE migrate ",
		"Queues.Workers FERRY_QUEUES queues queues[].workers",
		"Queues.MaxLength FERRY_QUEUE_MAX_LENGTH queue-max-length ",
		"Queues.MaxLengths   queues[].max_length",
		"Queues.FetchCooldown FERRY_FETCH_COOLDOWN fetch-cooldown ",
		"Queues.FetchPollInterval FERRY_FETCH_POLL_INTERVAL fetch-poll-interval ",
		"Queues.JobTimeout FERRY_JOB_TIMEOUT job-timeout ",
		"Queues.ShutdownGrace FERRY_SHUTDOWN_GRACE shutdown-grace ",
		"Queues.PriorityAging FERRY_PRIORITY_AGING priority-aging ",
		"Leader.Key FERRY_ELECTION_KEY election-key ",
		"Leader.Tick FERRY_LEADER_TICK leader-tick ",
		"Leader.TickTimeout FERRY_LEADER_TICK_TIMEOUT leader-tick-timeout ",
		"Leader.StandbyProbe FERRY_STANDBY_PROBE standby-probe ",
		"Liveness.SettleAfter FERRY_SETTLE_AFTER settle-after ",
		"Liveness.RescueInterval FERRY_RESCUE_INTERVAL rescue-interval ",
		"Liveness.MaxOrphaned FERRY_MAX_ORPHANED max-orphaned ",
		"Admin.Addr FERRY_ADMIN_ADDR admin-addr ",
		"Admin.Token FERRY_ADMIN_TOKEN admin-token ",
		"Outbox.MaxAttempts FERRY_OUTBOX_MAX_ATTEMPTS outbox-max-attempts outbox.max_attempts",
		"Outbox.RouteGrace FERRY_OUTBOX_ROUTE_GRACE outbox-route-grace ",
		"Outbox.Retention FERRY_OUTBOX_RETENTION outbox-retention ",
		"Telegram.APIURL FERRY_TELEGRAM_API_URL telegram-api-url ",
		"Broadcast.Keys FERRY_BROADCAST_KEYS broadcast-keys ",
		"Seal.Keys FERRY_SEAL_KEYS seal-keys ",
		"Seal.Encrypt FERRY_SEAL_ENCRYPT seal-encrypt ",
		"Seal.ReplayWindow FERRY_SEAL_REPLAY_WINDOW seal-replay-window ",
		"Retention.Ticks FERRY_TICK_RETENTION tick-retention ",
		"Retention.Terms FERRY_TERM_RETENTION term-retention ",
		"Retention.TelegramMalformed FERRY_TELEGRAM_MALFORMED_RETENTION telegram-malformed-retention ",
		"Retention.CompletedJobs FERRY_COMPLETED_JOB_RETENTION completed-job-retention ",
		"Retention.CancelledJobs FERRY_CANCELLED_JOB_RETENTION cancelled-job-retention ",
		"Retention.DiscardedJobs FERRY_DISCARDED_JOB_RETENTION discarded-job-retention ",
		"Workflow.Retention FERRY_WORKFLOW_RETENTION workflow-retention ",
	}, got)
}

// TestSettings_EachNameOnce: no variable or flag names two settings, and
// the variables that other parts of ferry read by a constant of their own
// (the CLI's seal, broadcast and pooler) are the declared ones.
func TestSettings_EachNameOnce(t *testing.T) {
	t.Parallel()
	seen := map[string]string{}
	var env []string
	for _, s := range settings.Of(Config{}.WithDefaults()) {
		for _, n := range slices.Concat(s.Env, s.Flag) {
			require.NotContains(t, seen, n, "%s and %s", seen[n], s.Path)
			seen[n] = s.Path
		}
		env = append(env, s.Env...)
	}
	for _, c := range []string{seal.EnvKeys, seal.EnvEncrypt, broadcast.EnvKeys, dburl.EnvPooler} {
		require.Contains(t, env, c)
	}
}
