package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

func writeConfig(t *testing.T, doc string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(path, []byte(doc), 0o600))
	return path
}

// everySchedule makes a database of its own and a config file with one
// schedule of ferry.noop every interval.
func everySchedule(t *testing.T, id, name, every string) (string, *pgxpool.Pool, string) {
	t.Helper()
	url := pgtest.NewDatabase(t, true)
	cfg := writeConfig(t, fmt.Sprintf(`
schedules:
  - id: %s
    name: %s
    every: %s
    kind: ferry.noop
`, id, name, every))
	return url, pgtest.PoolFor(t, url), cfg
}

type tickRow struct {
	At     time.Time
	Status string
	Reason *string
	JobID  *int64
	Term   int64
}

// TestSchedule_KillLeaderEveryTickOnce runs three workers with a schedule
// firing every second, kills the leader with SIGKILL midway, and checks that
// every tick of the window is recorded exactly once and each enqueued tick
// has exactly one job.
func TestSchedule_KillLeaderEveryTickOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool, cfg := everySchedule(t, "every-second", "Tick every second", "1s")
	extra := []string{"FERRY_CONFIG=" + cfg}
	args := electionArgs(time.Second)
	var workers []*proctest.Proc
	for range 3 {
		workers = append(workers, startWorker(t, url, extra, args...))
	}
	leaderOf := func(ws []*proctest.Proc) *proctest.Proc {
		pid := leaderPID(t, url)
		for _, w := range ws {
			if w.Pid() == pid {
				return w
			}
		}
		return nil
	}
	require.Eventually(t, func() bool { return leaderOf(workers) != nil }, 10*time.Second, 50*time.Millisecond)
	first := leaderOf(workers)
	_, err := first.WaitForLineFunc(10*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	_, err = first.WaitForLineFunc(5*time.Second, logtest.Logged("periodic: tick enqueued", "schedule", "every-second", "name", "Tick every second"))
	require.NoError(t, err)

	time.Sleep(10 * time.Second)
	require.NoError(t, first.Kill())
	killed := time.Now()
	var rest []*proctest.Proc
	for _, w := range workers {
		if w != first {
			rest = append(rest, w)
		}
	}
	require.Eventually(t, func() bool { return leaderOf(rest) != nil }, 10*time.Second, 50*time.Millisecond)
	second := leaderOf(rest)
	_, err = second.WaitForLineFunc(10*time.Second, logtest.Logged("periodic: caught up", "schedule", "every-second"))
	require.NoError(t, err, "the new leader catches up on the failover gap")
	t.Logf("new leader caught up %s after the kill", time.Since(killed))

	time.Sleep(10 * time.Second)
	for _, w := range rest {
		require.NoError(t, w.Signal(syscall.SIGTERM))
	}
	for _, w := range rest {
		code, err := w.Wait(stopTimeout)
		require.NoError(t, err)
		require.Zero(t, code)
	}

	rows, err := pool.Query(ctx, "SELECT tick_at, status, reason, job_id, term FROM ferry_periodic_tick WHERE schedule_id = 'every-second' ORDER BY tick_at")
	require.NoError(t, err)
	ticks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tickRow])
	require.NoError(t, err)
	require.Greater(t, len(ticks), 20)

	// Every second of the window, once: no gap, no duplicate (the primary
	// key forbids those), aligned to whole seconds.
	for i, tk := range ticks {
		require.Zero(t, tk.At.Nanosecond(), "aligned to the second")
		if i > 0 {
			require.Equal(t, time.Second, tk.At.Sub(ticks[i-1].At), "tick %d follows tick %d by one second: %v", i, i-1, tk.At)
		}
	}
	terms := map[int64]bool{}
	enqueued, missed := 0, 0
	for _, tk := range ticks {
		terms[tk.Term] = true
		switch tk.Status {
		case "enqueued":
			enqueued++
			require.NotNil(t, tk.JobID)
		case "skipped":
			require.NotNil(t, tk.Reason)
			if *tk.Reason == "missed: no leader was running" {
				missed++
			}
		}
	}
	require.Len(t, terms, 2, "two leaders wrote ticks, each with its own term")
	// The failover gap (about two seconds here) is covered: its latest tick
	// enqueued by catch-up, any older one recorded as missed. How many fall
	// in it depends on the phase of the kill against the ticks.
	t.Logf("%d ticks, %d enqueued, %d recorded as missed in the failover gap", len(ticks), enqueued, missed)

	var jobs, distinct int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT metadata->>'ferry_tick') FROM river_job
		WHERE metadata->>'ferry_schedule' = 'every-second'`).Scan(&jobs, &distinct))
	require.Equal(t, enqueued, jobs, "exactly one job per enqueued tick")
	require.Equal(t, jobs, distinct)
	var orphans int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_periodic_tick t LEFT JOIN river_job j ON j.id = t.job_id
		WHERE t.status = 'enqueued' AND j.id IS NULL`).Scan(&orphans))
	require.Zero(t, orphans)

	stdout, stderr, code := enqueue(t, url, nil, "schedule", "list", "--json")
	require.Zero(t, code, stderr)
	var list []struct {
		ID         string     `json:"id"`
		Name       string     `json:"name"`
		Trigger    string     `json:"trigger"`
		LastTickAt *time.Time `json:"last_tick_at"`
		NextRunAt  *time.Time `json:"next_run_at"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &list))
	require.Len(t, list, 1)
	require.Equal(t, "Tick every second", list[0].Name)
	require.Equal(t, ticks[len(ticks)-1].At.UTC(), list[0].LastTickAt.UTC())
}

func TestSchedule_BadConfigRefusesToStart(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	for name, tc := range map[string]struct{ doc, want string }{
		"bad cron":     {"schedules:\n  - {id: x, cron: \"61 * * * *\", kind: ferry.noop}\n", `schedules[0] (id "x"): cron: cron "61 * * * *": minute field`},
		"unknown kind": {"schedules:\n  - {id: x, every: 1m, kind: mail.send}\n", `schedules[0] (id "x"): kind: "mail.send" is not a job kind this worker runs`},
		"bad zone":     {"schedules:\n  - {id: x, cron: \"0 6 * * *\", zone: Mars/Olympus, kind: ferry.noop}\n", "Mars/Olympus"},
		"duplicate id": {"schedules:\n  - {id: x, every: 1m, kind: ferry.noop}\n  - {id: x, every: 1h, kind: ferry.noop}\n", `schedules[1] (id "x"): id: already used by schedules[0]`},
		"unknown key":  {"schedules:\n  - {id: x, every: 1m, kind: ferry.noop, tz: UTC}\n", "unknown key tz"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := writeConfig(t, tc.doc)
			stdout, stderr, code := runWorker(t, env(url, "FERRY_CONFIG="+cfg), 15*time.Second, "run", "--admin-addr", "off")
			require.Equal(t, 2, code, stderr)
			require.Empty(t, stdout)
			line := oneLine(t, stderr)
			require.Contains(t, line, "config "+cfg+": ")
			require.Contains(t, line, tc.want)
		})
	}
}

func TestSchedule_Next(t *testing.T) {
	t.Parallel()
	// DST through the CLI: 02:30 is skipped in Madrid on 2027-03-28 and runs
	// at 03:30; on 2027-10-31 it repeats and runs once.
	stdout, stderr, code := proctest.Run(t, bins(t).enqueue, nil, nil,
		"schedule", "next", "30 2 * * *", "--tz", "Europe/Madrid", "--from", "2027-03-27T00:00:00Z", "--count", "3")
	require.Zero(t, code, stderr)
	require.Equal(t, "2027-03-27T02:30:00+01:00\n2027-03-28T03:30:00+02:00\n2027-03-29T02:30:00+02:00\n", stdout)

	stdout, _, code = proctest.Run(t, bins(t).enqueue, nil, nil,
		"schedule", "next", "30 2 * * *", "--tz", "Europe/Madrid", "--from", "2027-10-30T12:00:00Z", "--count", "2")
	require.Zero(t, code)
	require.Equal(t, "2027-10-31T02:30:00+02:00\n2027-11-01T02:30:00+01:00\n", stdout)

	stdout, _, code = proctest.Run(t, bins(t).enqueue, nil, nil, "schedule", "next", "every 5m", "--from", "2027-01-01T00:03:00Z", "--count", "2", "--json")
	require.Zero(t, code)
	require.JSONEq(t, `{"trigger":"every 5m","zone":"UTC","next":["2027-01-01T00:05:00Z","2027-01-01T00:10:00Z"]}`, stdout)

	for _, bad := range [][]string{
		{"schedule", "next", "61 * * * *"},
		{"schedule", "next", "0 6 * * *", "--tz", "Mars/Olympus"},
		{"schedule", "next", "every 5m", "--tz", "Europe/Madrid"},
		{"schedule", "next", "0 6 * * *", "--count", "0"},
		{"schedule", "next"},
	} {
		_, stderr, code := proctest.Run(t, bins(t).enqueue, nil, nil, bad...)
		require.Equal(t, 2, code, strings.Join(bad, " "))
		oneLine(t, stderr)
	}
}

// TestSchedule_KillLeaderAtDefaultsCostsNoTick kills the leader with
// SIGKILL at the default election settings, a second before a tick of a
// schedule firing every 5 s, and checks that the crash costs no tick: the
// successor starts within the interval, so the tick the crash fell on is
// caught up late, and every tick of the window is recorded once, enqueued,
// none as missed.
func TestSchedule_KillLeaderAtDefaultsCostsNoTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, pool, cfg := everySchedule(t, "every-5s", "Tick every five seconds", "5s")
	extra := []string{"FERRY_CONFIG=" + cfg}
	first := startWorker(t, url, extra)
	_, err := first.WaitForLineFunc(30*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	second := startWorker(t, url, extra)
	_, err = second.WaitForLineFunc(10*time.Second, logtest.Logged("election: standby"))
	require.NoError(t, err)
	line, err := first.WaitForLineFunc(10*time.Second, logtest.Logged("periodic: tick enqueued", "schedule", "every-5s"))
	require.NoError(t, err)
	var rec struct {
		Tick time.Time `json:"tick"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &rec))
	require.False(t, rec.Tick.IsZero(), "the tick enqueued: %s", line)

	// A second before the next tick.
	time.Sleep(time.Until(rec.Tick.Add(4 * time.Second)))
	require.NoError(t, first.Kill())
	_, err = second.WaitForLineFunc(30*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err)
	// Two ticks of the new leader's own after the one the crash fell on.
	last := rec.Tick.Add(15 * time.Second)
	_, err = second.WaitForLineFunc(30*time.Second, func(l string) bool {
		var r struct {
			Msg      string    `json:"msg"`
			Schedule string    `json:"schedule"`
			Tick     time.Time `json:"tick"`
		}
		return json.Unmarshal([]byte(l), &r) == nil && r.Msg == "periodic: tick enqueued" && r.Schedule == "every-5s" && !r.Tick.Before(last)
	})
	require.NoError(t, err)
	stop(t, second, stopTimeout)

	rows, err := pool.Query(ctx, `SELECT tick_at, status, reason, job_id, term FROM ferry_periodic_tick
		WHERE schedule_id = 'every-5s' AND tick_at BETWEEN $1 AND $2 ORDER BY tick_at`, rec.Tick, last)
	require.NoError(t, err)
	ticks, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tickRow])
	require.NoError(t, err)
	require.Len(t, ticks, 4, "every tick of the window recorded: %+v", ticks)
	terms := map[int64]bool{}
	for i, tk := range ticks {
		require.Equal(t, rec.Tick.Add(time.Duration(i)*5*time.Second).UTC(), tk.At.UTC(), "tick %d", i)
		reason := ""
		if tk.Reason != nil {
			reason = *tk.Reason
		}
		require.Equal(t, "enqueued", tk.Status, "tick %s: %s (late, not skipped)", tk.At, reason)
		require.NotNil(t, tk.JobID)
		terms[tk.Term] = true
	}
	require.Len(t, terms, 2, "the killed leader's ticks and its successor's")
}
