package e2e_test

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// runWorker runs the worker binary and requires it to exit within timeout:
// a worker that took a bad setting would run until killed.
func runWorker(t *testing.T, env []string, timeout time.Duration, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	p := proctest.Start(t, bins(t).worker, env, args...)
	code, err := p.Wait(timeout)
	require.NoError(t, err, "the worker should have refused to start")
	return p.Stdout(), p.Stderr(), code
}

func TestWorker_BadConfig(t *testing.T) {
	t.Parallel()
	// Migrated, so that a setting checked only after connecting is reached.
	url := pgtest.NewDatabase(t, true)

	tests := []struct {
		name string
		args []string
		env  []string
		want string // in the message
	}{
		{name: "QueuesFlag", args: []string{"--queues", "bogus"}, want: `"bogus" is not name=workers`},
		{name: "QueuesEnvZeroWorkers", env: []string{"FERRY_QUEUES=default=0"}, want: "workers 0"},
		{name: "ShutdownGraceEnv", env: []string{"FERRY_SHUTDOWN_GRACE=abc"}, want: "FERRY_SHUTDOWN_GRACE"},
		{name: "QueueMaxLengthEnv", env: []string{"FERRY_QUEUE_MAX_LENGTH=lots"}, want: "FERRY_QUEUE_MAX_LENGTH"},
		{name: "QueueMaxLengthNegative", env: []string{"FERRY_QUEUE_MAX_LENGTH=-1"}, want: "queue max length -1 is negative"},
		{name: "LogLevel", args: []string{"--log-level", "loud"}, want: `log level "loud"`},
		{name: "LogFormatEnv", env: []string{"FERRY_LOG_FORMAT=xml"}, want: `log format "xml"`},
		{name: "Argument", args: []string{"extra"}, want: "run takes no arguments"},
		{name: "AdminExposedWithoutToken", args: []string{"--admin-addr", "0.0.0.0:0"}, want: "without FERRY_ADMIN_TOKEN"},
		{name: "ShutdownGraceNegative", args: []string{"--shutdown-grace", "-1s"}, want: "shutdown grace -1s is negative"},
		{name: "PollIntervalBelowCooldown", args: []string{"--fetch-cooldown", "5ms", "--fetch-poll-interval", "2ms"}, want: "fetch poll interval 2ms is below the fetch cooldown 5ms"},
		{name: "LeaderTickTooShort", args: []string{"--leader-tick", "5ms"}, want: "leader tick 5ms is under 10ms"},
		{name: "LeaderTickTimeoutNegative", args: []string{"--leader-tick-timeout", "-1s"}, want: "leader tick timeout -1s must be above zero"},
		{name: "ElectionKeyNotANumber", env: []string{"FERRY_ELECTION_KEY=abc"}, want: "FERRY_ELECTION_KEY"},
		{name: "ElectionURLUnparsable", env: []string{"FERRY_ELECTION_DATABASE_URL=postgres://u:s3cretpw@127.0.0.1:notaport/x"}, want: "session database URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"run"}
			if !strings.Contains(strings.Join(tt.args, " "), "--admin-addr") {
				args = append(args, "--admin-addr", "off")
			}
			stdout, stderr, code := runWorker(t, env(url, tt.env...), 15*time.Second, append(args, tt.args...)...)
			require.Equal(t, 2, code, "exit code; stderr: %s", stderr)
			require.NotContains(t, stderr, "s3cretpw")
			require.Empty(t, stdout)
			line := oneLine(t, stderr)
			require.True(t, strings.HasPrefix(line, "worker: "), line)
			require.Contains(t, line, tt.want)
		})
	}
}

// freePort returns a loopback port where nothing listens (it was free a
// moment ago).
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	return port
}

func TestWorker_PasswordNeverPrinted(t *testing.T) {
	t.Parallel()
	const password = "s3cretpw"
	port := freePort(t)
	b := bins(t)

	urls := map[string]string{
		"URL":              fmt.Sprintf("postgres://ferry:%s@127.0.0.1:%d/ferry?sslmode=disable&connect_timeout=5", password, port),
		"URLPasswordParam": fmt.Sprintf("postgres://ferry@127.0.0.1:%d/ferry?sslmode=disable&password=%s", port, password),
		"KeywordValue":     fmt.Sprintf("host=127.0.0.1 port=%d user=ferry password=%s dbname=ferry sslmode=disable", port, password),
		"Unparsable":       fmt.Sprintf("postgres://ferry:%s@127.0.0.1:%d/ferry?connect_timeout=soon", password, port),
	}
	commands := map[string]struct {
		bin  string
		args []string
	}{
		"Run":           {b.worker, []string{"run", "--admin-addr", "off"}},
		"RunMigrate":    {b.worker, []string{"run", "--admin-addr", "off", "--migrate"}},
		"MigrateUp":     {b.worker, []string{"migrate", "up"}},
		"MigrateStatus": {b.worker, []string{"migrate", "status", "--json"}},
		"Enqueue":       {b.enqueue, []string{"job", "ferry.noop"}},
	}
	for urlName, url := range urls {
		for cmdName, c := range commands {
			t.Run(urlName+"/"+cmdName, func(t *testing.T) {
				t.Parallel()
				p := proctest.Start(t, c.bin, env(url, "FERRY_LOG_LEVEL=debug"), c.args...)
				code, err := p.Wait(20 * time.Second)
				require.NoError(t, err)
				require.NotZero(t, code, "nothing listens on port %d", port)
				line := oneLine(t, p.Stderr())
				require.NotContains(t, line, password)
				require.NotContains(t, p.Stdout(), password)
			})
		}
	}

	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			bin  string
			args []string
		}{
			{b.worker, []string{"run", "--help"}},
			{b.worker, []string{"migrate", "up", "--help"}},
			{b.enqueue, []string{"job", "--help"}},
		} {
			stdout, stderr, code := proctest.Run(t, c.bin, env(urls["URL"]), nil, c.args...)
			require.Zero(t, code, stderr)
			require.Contains(t, stdout, "DATABASE_URL", "the help names the variable")
			require.NotContains(t, stdout+stderr, password, "but not its value")
		}
	})

	t.Run("SessionURLUnreachable", func(t *testing.T) {
		t.Parallel()
		// The session connection (the leader lock, the worker's liveness)
		// defaults to DATABASE_URL and may have its own; a worker that
		// cannot open it cannot register, logs why while it tries, and
		// stops with one line, never naming the password.
		stdout, stderr, code := runWorker(t, env(pgtest.NewDatabase(t, true), "FERRY_ELECTION_DATABASE_URL="+urls["URL"]), 60*time.Second, "run")
		require.Equal(t, 1, code, "stderr: %s", stderr)
		require.Contains(t, stderr, "connection refused", "the failure is logged")
		require.Contains(t, lastLine(stderr), "cannot register this worker, so it may not work jobs")
		require.NotContains(t, stderr+stdout, password)
	})
}

func TestWorker_BadConfigCheckedBeforeConnecting(t *testing.T) {
	t.Parallel()
	// Nothing listens on the database's port: a setting that is wrong must
	// still be the error reported, not the connection.
	url := fmt.Sprintf("postgres://ferry:s3cretpw@127.0.0.1:%d/ferry?sslmode=disable", freePort(t))
	stdout, stderr, code := runWorker(t, env(url), 15*time.Second, "run", "--admin-addr", "0.0.0.0:0")
	require.Equal(t, 2, code, "stderr: %s", stderr)
	require.Empty(t, stdout)
	require.Contains(t, oneLine(t, stderr), "without FERRY_ADMIN_TOKEN")
	require.NotContains(t, stderr, "s3cretpw")
}

// A 0 for a setting whose zero would mean its default, and a duration out
// of range, are refused with the reason, before connecting.
func TestWorker_ZeroAndOutOfRangeRefused(t *testing.T) {
	t.Parallel()
	url := fmt.Sprintf("postgres://ferry:ferry@127.0.0.1:%d/ferry?sslmode=disable", freePort(t))
	for _, c := range []struct {
		args []string
		env  []string
		want string
	}{
		{args: []string{"--leader-tick", "0s"}, want: "--leader-tick 0s: must be above 0 (unset, it is 1.5s)"},
		{args: []string{"--rescue-interval", "0s"}, want: "--rescue-interval 0s: must be above 0 (unset, it is 1s)"},
		{args: []string{"--fetch-poll-interval", "0s"}, want: "--fetch-poll-interval 0s: must be above 0 (unset, it is 100ms)"},
		{args: []string{"--outbox-max-attempts", "0"}, want: "--outbox-max-attempts 0: must not be 0 (unset, it is the config file's, else 24)"},
		{env: []string{"FERRY_LEADER_TICK=0s"}, want: "--leader-tick 0s: must be above 0"},
		{args: []string{"--leader-tick", "9999999h"}, want: `invalid value "9999999h" for flag -leader-tick: not a duration such as 90s, 1m30s or 1h (of at most 2562047h)`},
		{env: []string{"FERRY_LEADER_TICK=5x"}, want: "not a duration such as 90s"},
	} {
		stdout, stderr, code := runWorker(t, env(url, c.env...), 15*time.Second, append([]string{"run"}, c.args...)...)
		require.Equal(t, 2, code, "%v %v: %s", c.args, c.env, stderr)
		require.Empty(t, stdout)
		require.Contains(t, oneLine(t, stderr), c.want)
	}
}
