package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// writeFile writes content to a file in a test directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func TestEnqueue_BadInput(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	// 64 KiB of args is the limit; this is one byte more.
	oversized := writeFile(t, "big.json", `{"x":"`+strings.Repeat("a", 64<<10-len(`{"x":""}`)+1)+`"}`)

	tests := []struct {
		name  string
		args  []string
		env   []string // replaces the usual environment when set
		stdin string
		want  string // in the message
	}{
		{name: "UnknownKind", args: []string{"job", "no.such.kind"}, want: `unknown job kind "no.such.kind"`},
		{name: "ArgsNotJSON", args: []string{"job", "ferry.noop", "--args", "sleep=1s"}, want: "args must be a JSON object"},
		{name: "ArgsArray", args: []string{"job", "ferry.noop", "--args", `[1,2]`}, want: "got a JSON array"},
		{name: "ArgsNull", args: []string{"job", "ferry.noop", "--args", `null`}, want: "args must be a JSON object"},
		{name: "ArgsOver64KiB", args: []string{"job", "ferry.noop", "--args", "@" + oversized}, want: "over the 65536 byte limit"},
		{name: "ArgsEmptyStdin", args: []string{"job", "ferry.noop", "--args", "-"}, want: "args must be a JSON object"},
		{name: "ArgsUnknownField", args: []string{"job", "ferry.noop", "--args", `{"slep":"1s"}`}, want: `unknown field "slep"`},
		{name: "ArgsBadDuration", args: []string{"job", "ferry.noop", "--args", `{"sleep":"soon"}`}, want: "duration"},
		{name: "ArgsFileMissing", args: []string{"job", "ferry.noop", "--args", "@/no/such/file.json"}, want: "no such file"},
		{name: "Priority0", args: []string{"job", "ferry.noop", "--priority", "0"}, want: "--priority 0"},
		{name: "Priority5", args: []string{"job", "ferry.noop", "--priority", "5"}, want: "--priority 5"},
		{name: "PriorityNotANumber", args: []string{"job", "ferry.noop", "--priority", "high"}, want: "priority"},
		{name: "AtNotRFC3339", args: []string{"job", "ferry.noop", "--at", "tomorrow 6am"}, want: "RFC 3339"},
		{name: "InNegative", args: []string{"job", "ferry.noop", "--in", "-5m"}, want: "--in"},
		{name: "AtAndIn", args: []string{"job", "ferry.noop", "--at", "2030-01-01T00:00:00Z", "--in", "1h"}, want: "--at and --in"},
		{name: "MaxAttempts0", args: []string{"job", "ferry.noop", "--max-attempts", "0"}, want: "--max-attempts 0"},
		{name: "TagWithSpace", args: []string{"job", "ferry.noop", "--tag", "night ly"}, want: "--tag"},
		{name: "TagTooShort", args: []string{"job", "ferry.noop", "--tag", "x"}, want: "--tag"},
		{name: "QueueUppercase", args: []string{"job", "ferry.noop", "--queue", "Reports"}, want: "--queue"},
		{name: "UniqueKeyBlank", args: []string{"job", "ferry.noop", "--unique-key", " "}, want: "--unique-key"},
		{name: "DebounceWithoutWindow", args: []string{"job", "ferry.noop", "--debounce", "k"}, want: "--debounce needs --debounce-window"},
		{name: "DebounceWindowWithoutKey", args: []string{"job", "ferry.noop", "--debounce-window", "5s"}, want: "need --debounce KEY"},
		{name: "DebounceBlank", args: []string{"job", "ferry.noop", "--debounce", " ", "--debounce-window", "5s"}, want: "--debounce: debounce key is empty"},
		{name: "DebounceMaxWaitUnderWindow", args: []string{"job", "ferry.noop", "--debounce", "k", "--debounce-window", "1m", "--debounce-max-wait", "5s"}, want: "max wait 5s is under the window 1m0s"},
		{name: "DebounceAndUniqueKey", args: []string{"job", "ferry.noop", "--debounce", "k", "--debounce-window", "5s", "--unique-key", "u"}, want: "one or the other"},
		{name: "DebounceAndIn", args: []string{"job", "ferry.noop", "--debounce", "k", "--debounce-window", "5s", "--in", "1m"}, want: "drop --at and --in"},
		{name: "MissingKind", args: []string{"job"}, want: "exactly one KIND"},
		{name: "TwoKinds", args: []string{"job", "ferry.noop", "http.request"}, want: "exactly one KIND"},
		{name: "NoDatabaseURL", args: []string{"job", "ferry.noop"}, env: []string{"FERRY_LOG_FORMAT=json"}, want: "DATABASE_URL"},
		{name: "UnknownFlag", args: []string{"job", "ferry.noop", "--priorty", "2"}, want: "flag provided but not defined"},
		{name: "HTTPRelativeURL", args: []string{"job", "http.request", "--args", `{"url":"/internal/warm"}`}, want: "not an absolute http(s) URL"},
		{name: "HTTPBadMethod", args: []string{"job", "http.request", "--args", `{"method":"FETCH","url":"http://app/warm"}`}, want: "method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env(url)
			if tt.env != nil {
				e = tt.env
			}
			stdout, stderr, code := proctest.Run(t, bins(t).enqueue, e, strings.NewReader(tt.stdin), tt.args...)
			require.Equal(t, 2, code, "exit code; stderr: %s", stderr)
			require.Empty(t, stdout)
			line := oneLine(t, stderr)
			require.True(t, strings.HasPrefix(line, "enqueue: "), line)
			require.Contains(t, line, tt.want)
			require.Zero(t, countJobs(t, pool), "nothing was written")
		})
	}
}

// enqueued is `enqueue job --json` output.
type enqueued struct {
	ID          int64     `json:"id"`
	Kind        string    `json:"kind"`
	Queue       string    `json:"queue"`
	State       string    `json:"state"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Duplicate   bool      `json:"duplicate"`
}

func enqueueJSON(t *testing.T, url string, args ...string) enqueued {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, append(append([]string{"job"}, args...), "--json")...)
	require.Zero(t, code, stderr)
	require.Empty(t, stderr)
	var e enqueued
	require.NoError(t, json.Unmarshal([]byte(stdout), &e), "not JSON: %q", stdout)
	return e
}

// --database-url is read before the command as after it, and wins over
// DATABASE_URL either way.
func TestEnqueue_DatabaseURLBeforeTheCommand(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	id := enqueueID(t, url, "ferry.noop")
	wrong := "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"
	for _, c := range []struct {
		env  []string
		args []string
	}{
		{[]string{"FERRY_LOG_FORMAT=json"}, []string{"--database-url", url, "jobs", "list", "--json"}},
		{env(wrong), []string{"--database-url", url, "jobs", "list", "--json"}},
		{env(wrong), []string{"jobs", "list", "--database-url", url, "--json"}},
	} {
		stdout, stderr, code := proctest.Run(t, bins(t).enqueue, c.env, nil, c.args...)
		require.Zero(t, code, "%v: %s", c.args, stderr)
		require.Contains(t, stdout, fmt.Sprintf(`"id": %d,`, id), "%v", c.args)
	}
}

func TestEnqueue_Job(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	t.Run("PrintsID", func(t *testing.T) {
		t.Parallel()
		id := enqueueID(t, url, "ferry.noop")
		j := getJob(t, pool, id)
		require.Equal(t, "ferry.noop", j.Kind)
		require.Equal(t, "available", j.State)
		require.Equal(t, 1, j.Priority)
		require.Empty(t, j.Args)
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		before := time.Now()
		e := enqueueJSON(t, url, "ferry.noop", "--priority", "3", "--max-attempts", "5")
		require.Positive(t, e.ID)
		require.Equal(t, "ferry.noop", e.Kind)
		require.Equal(t, "default", e.Queue)
		require.Equal(t, "available", e.State)
		require.False(t, e.Duplicate)
		requireBetween(t, before, e.ScheduledAt, "scheduled_at")
		j := getJob(t, pool, e.ID)
		require.Equal(t, 3, j.Priority)
		require.Equal(t, 5, j.MaxAttempts)
	})

	t.Run("ArgsFromStdin", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := enqueue(t, url, strings.NewReader(`{"sleep": "1ms"}`), "job", "ferry.noop", "--args", "-")
		require.Zero(t, code, stderr)
		id, err := strconv.ParseInt(strings.TrimSpace(stdout), 10, 64)
		require.NoError(t, err)
		require.Equal(t, map[string]any{"sleep": "1ms"}, getJob(t, pool, id).Args)
	})

	t.Run("ArgsFromFile", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, "args.json", "{\n  \"url\": \"http://127.0.0.1:1/warm\",\n  \"method\": \"POST\"\n}\n")
		id := enqueueID(t, url, "http.request", "--args", "@"+path)
		require.Equal(t, map[string]any{"url": "http://127.0.0.1:1/warm", "method": "POST"}, getJob(t, pool, id).Args)
	})

	t.Run("UniqueKey", func(t *testing.T) {
		t.Parallel()
		first := enqueueID(t, url, "ferry.noop", "--unique-key", "nightly-2026-11-30")

		stdout, stderr, code := enqueue(t, url, nil, "job", "ferry.noop", "--unique-key", "nightly-2026-11-30")
		require.Zero(t, code, stderr)
		require.Contains(t, oneLine(t, stdout), "unique key matched existing job "+strconv.FormatInt(first, 10))

		e := enqueueJSON(t, url, "ferry.noop", "--unique-key", "nightly-2026-11-30")
		require.Equal(t, first, e.ID)
		require.True(t, e.Duplicate)

		other := enqueueID(t, url, "ferry.noop", "--unique-key", "nightly-2026-12-01")
		require.NotEqual(t, first, other, "another key is another job")
	})

	t.Run("Debounce", func(t *testing.T) {
		t.Parallel()
		first := enqueueJSON(t, url, "ferry.noop", "--args", `{"sleep":"1ms"}`, "--debounce", "reindex-7", "--debounce-window", "1h")
		require.Equal(t, "scheduled", first.State)
		require.False(t, first.Duplicate)

		stdout, stderr, code := enqueue(t, url, nil, "job", "ferry.noop", "--args", `{"sleep":"2ms"}`, "--debounce", "reindex-7", "--debounce-window", "1h")
		require.Zero(t, code, stderr)
		require.Contains(t, oneLine(t, stdout), "debounced into job "+strconv.FormatInt(first.ID, 10))
		var args string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT args::text FROM river_job WHERE id = $1`, first.ID).Scan(&args))
		require.JSONEq(t, `{"sleep":"2ms"}`, args, "the last insert's args")

		other := enqueueJSON(t, url, "ferry.noop", "--debounce", "reindex-8", "--debounce-window", "1h")
		require.NotEqual(t, first.ID, other.ID, "another key is another job")
	})

	t.Run("InOneHour", func(t *testing.T) {
		t.Parallel()
		e := enqueueJSON(t, url, "ferry.noop", "--in", "1h")
		require.Equal(t, "scheduled", e.State)
		in := getJob(t, pool, e.ID).ScheduledIn
		require.InDelta(t, time.Hour.Seconds(), in.Seconds(), time.Minute.Seconds())
	})

	t.Run("At", func(t *testing.T) {
		t.Parallel()
		at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
		e := enqueueJSON(t, url, "ferry.noop", "--at", at.Format(time.RFC3339))
		require.Equal(t, "scheduled", e.State)
		require.True(t, at.Equal(e.ScheduledAt), "scheduled at %s, want %s", e.ScheduledAt, at)
	})

	t.Run("Tags", func(t *testing.T) {
		t.Parallel()
		id := enqueueID(t, url, "ferry.noop", "--tag", "nightly", "--tag", "ops_drill-2")
		require.Equal(t, []string{"nightly", "ops_drill-2"}, getJob(t, pool, id).Tags)
	})

	t.Run("FlagsBeforeKind", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := enqueue(t, url, nil, "job", "--queue", "reports", "ferry.noop")
		require.Zero(t, code, stderr)
		id, err := strconv.ParseInt(strings.TrimSpace(stdout), 10, 64)
		require.NoError(t, err)
		require.Equal(t, "reports", getJob(t, pool, id).Queue)
	})

	t.Run("KindRegisteredByAWorker", func(t *testing.T) {
		t.Parallel()
		_, err := pool.Exec(context.Background(),
			`INSERT INTO ferry_job_kind (kind, queue, description) VALUES ('app.report', 'reports', 'nightly report')`)
		require.NoError(t, err)

		// Args of a kind ferry does not know are only checked to be an object.
		e := enqueueJSON(t, url, "app.report", "--args", `{"day":"2026-11-30","pages":[1,2]}`)
		require.Equal(t, "app.report", e.Kind)
		require.Equal(t, "reports", e.Queue, "the kind's queue is the default")

		stdout, stderr, code := enqueue(t, url, nil, "job", "app.report", "--queue", "urgent", "--json")
		require.Zero(t, code, stderr)
		require.NoError(t, json.Unmarshal([]byte(stdout), &e), stdout)
		require.Equal(t, "urgent", e.Queue, "--queue wins")
		require.Contains(t, oneLine(t, stderr), `"warning":"no live worker works queue \"urgent\"`, "no worker runs here")
	})
}
