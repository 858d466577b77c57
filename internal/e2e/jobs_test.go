package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// jobOut is a job in the JSON of `enqueue jobs list|get` and `dead list`.
type jobOut struct {
	ID          int64           `json:"id"`
	Kind        string          `json:"kind"`
	Queue       string          `json:"queue"`
	State       string          `json:"state"`
	Priority    int             `json:"priority"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Tags        []string        `json:"tags"`
	Args        json.RawMessage `json:"args"`
	Errors      []struct {
		Attempt int       `json:"attempt"`
		At      time.Time `json:"at"`
		Error   string    `json:"error"`
	} `json:"errors"`
	CreatedAt   time.Time  `json:"created_at"`
	ScheduledAt time.Time  `json:"scheduled_at"`
	FinalizedAt *time.Time `json:"finalized_at"`
}

// actionOut is one id in the JSON of `enqueue jobs retry|cancel|delete`.
type actionOut struct {
	ID    int64  `json:"id"`
	OK    bool   `json:"ok"`
	State string `json:"state"`
	Note  string `json:"note"`
	Error string `json:"error"`
}

// deadOut is the JSON of `enqueue dead retry|discard`.
type deadOut struct {
	Count   int         `json:"count"`
	IDs     []int64     `json:"ids"`
	Skipped []actionOut `json:"skipped"`
}

// enqueueOK runs enqueue args… (with --json), requires exit 0 and no stderr,
// and decodes stdout into v.
func enqueueOK(t *testing.T, url string, v any, args ...string) {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, append(args, "--json")...)
	require.Zero(t, code, "enqueue %s: %s", strings.Join(args, " "), stderr)
	require.Empty(t, stderr)
	require.NoError(t, json.Unmarshal([]byte(stdout), v), "not JSON: %q", stdout)
}

// requireBadInput runs enqueue args… and requires exit 2 with one line on
// stderr containing want, and nothing on stdout.
func requireBadInput(t *testing.T, url string, want string, args ...string) {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, args...)
	require.Equal(t, 2, code, "exit code; stderr: %s", stderr)
	require.Empty(t, stdout)
	require.Contains(t, oneLine(t, stderr), want)
}

// failJob gives job id one error per message (attempts 1…n, a minute apart)
// and puts it in state, as a worker would have.
func failJob(t *testing.T, pool *pgxpool.Pool, id int64, state string, msgs ...string) {
	t.Helper()
	errs := make([]string, len(msgs))
	for i, m := range msgs {
		b, err := json.Marshal(map[string]any{
			"at": time.Now().Add(time.Duration(i-len(msgs)) * time.Minute).UTC(), "attempt": i + 1, "error": m, "trace": "",
		})
		require.NoError(t, err)
		errs[i] = string(b)
	}
	_, err := pool.Exec(context.Background(), `
		UPDATE river_job
		SET state = $2::river_job_state, attempt = $3, errors = $4::text[]::jsonb[], attempted_at = now(),
		    finalized_at = CASE WHEN $2 IN ('cancelled', 'completed', 'discarded') THEN now() END
		WHERE id = $1`, id, state, len(msgs), errs)
	require.NoError(t, err)
}

func idArgs(ids ...int64) []string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return s
}

func listIDs(list []jobOut) []int64 {
	ids := make([]int64, len(list))
	for i, j := range list {
		ids[i] = j.ID
	}
	return ids
}

func TestJobs_List(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	bulkJSON(t, url,
		`{"kind":"ferry.noop"}`,
		`{"kind":"http.request","args":{"url":"http://127.0.0.1:1/a"},"queue":"web","tags":["nightly"]}`,
		`{"kind":"ferry.noop","queue":"reports","tags":["nightly","ops"]}`,
		`{"kind":"http.request","args":{"url":"http://127.0.0.1:1/b"}}`,
		`{"kind":"ferry.noop","scheduled_at":"2099-01-01T00:00:00Z"}`,
	)
	ids := jobIDs(t, pool)
	require.Len(t, ids, 5)
	failJob(t, pool, ids[3], "retryable", "boom")
	_, err := pool.Exec(context.Background(), "UPDATE river_job SET created_at = now() - interval '3 hours' WHERE id = $1", ids[0])
	require.NoError(t, err)

	list := func(t *testing.T, args ...string) []int64 {
		t.Helper()
		var out []jobOut
		enqueueOK(t, url, &out, append([]string{"jobs", "list"}, args...)...)
		return listIDs(out)
	}
	rev := func(is ...int) []int64 { // ids[i] for each i, newest first as given
		out := make([]int64, len(is))
		for k, i := range is {
			out[k] = ids[i]
		}
		return out
	}

	tests := []struct {
		name string
		args []string
		want []int64
	}{
		{name: "All", want: rev(4, 3, 2, 1, 0)},
		{name: "State", args: []string{"--state", "retryable"}, want: rev(3)},
		{name: "States", args: []string{"--state", "retryable", "--state", "scheduled"}, want: rev(4, 3)},
		{name: "Kind", args: []string{"--kind", "http.request"}, want: rev(3, 1)},
		{name: "Queue", args: []string{"--queue", "reports"}, want: rev(2)},
		{name: "Queues", args: []string{"--queue", "reports", "--queue", "web"}, want: rev(2, 1)},
		{name: "Tag", args: []string{"--tag", "nightly"}, want: rev(2, 1)},
		{name: "TagAny", args: []string{"--tag", "ops", "--tag", "nope"}, want: rev(2)},
		{name: "SinceDuration", args: []string{"--since", "1h"}, want: rev(4, 3, 2, 1)},
		{name: "SinceTime", args: []string{"--since", time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339)}, want: rev(4, 3, 2, 1)},
		{name: "Limit", args: []string{"--limit", "2"}, want: rev(4, 3)},
		{name: "Combined", args: []string{"--kind", "ferry.noop", "--tag", "nightly", "--since", "1h"}, want: rev(2)},
		{name: "NoMatch", args: []string{"--kind", "app.none"}, want: []int64{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, list(t, tt.args...))
		})
	}

	t.Run("JSONFields", func(t *testing.T) {
		t.Parallel()
		var out []jobOut
		enqueueOK(t, url, &out, "jobs", "list", "--state", "retryable")
		require.Len(t, out, 1)
		j := out[0]
		require.Equal(t, "http.request", j.Kind)
		require.Equal(t, "default", j.Queue)
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, 25, j.MaxAttempts)
		require.JSONEq(t, `{"url":"http://127.0.0.1:1/b"}`, string(j.Args))
		require.Len(t, j.Errors, 1)
		require.Equal(t, []string{}, j.Tags)
	})

	t.Run("Table", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := enqueue(t, url, nil, "jobs", "list", "--queue", "web")
		require.Zero(t, code, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Len(t, lines, 2)
		require.Equal(t, []string{"ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "CREATED", "SCHEDULED"}, strings.Fields(lines[0]))
		require.Equal(t, []string{strconv.FormatInt(ids[1], 10), "http.request", "web", "available", "0/25"}, strings.Fields(lines[1])[:5])
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		requireBadInput(t, url, `--state "done"`, "jobs", "list", "--state", "done")
		requireBadInput(t, url, "--limit 0", "jobs", "list", "--limit", "0")
		requireBadInput(t, url, "--limit 10001", "jobs", "list", "--limit", "10001")
		requireBadInput(t, url, `--since "yesterday"`, "jobs", "list", "--since", "yesterday")
		requireBadInput(t, url, "--queue", "jobs", "list", "--queue", "Reports")
		requireBadInput(t, url, "list takes no arguments", "jobs", "list", "extra")
	})
}

func TestJobs_Get(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	id := enqueueID(t, url, "http.request", "--args", `{"url":"http://127.0.0.1:1/warm","method":"POST"}`, "--tag", "nightly")
	failJob(t, pool, id, "retryable", "http.request: POST http://127.0.0.1:1/warm: connection refused", "http.request: POST http://127.0.0.1:1/warm: timed out after 30s")

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		var j jobOut
		enqueueOK(t, url, &j, "jobs", "get", strconv.FormatInt(id, 10))
		require.Equal(t, id, j.ID)
		require.Equal(t, "http.request", j.Kind)
		require.Equal(t, "retryable", j.State)
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, []string{"nightly"}, j.Tags)
		require.JSONEq(t, `{"url":"http://127.0.0.1:1/warm","method":"POST"}`, string(j.Args))
		require.Len(t, j.Errors, 2)
		require.Equal(t, 1, j.Errors[0].Attempt)
		require.Contains(t, j.Errors[0].Error, "connection refused")
		require.Equal(t, 2, j.Errors[1].Attempt)
		require.Contains(t, j.Errors[1].Error, "timed out")
		require.True(t, j.Errors[0].At.Before(j.Errors[1].At))
		var created time.Time
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT created_at FROM river_job WHERE id = $1`, id).Scan(&created))
		require.True(t, created.Equal(j.CreatedAt), "created_at as stored: %s, got %s", created, j.CreatedAt)
	})

	t.Run("Human", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := enqueue(t, url, nil, "jobs", "get", strconv.FormatInt(id, 10))
		require.Zero(t, code, stderr)
		require.Regexp(t, `(?m)^state\s+retryable$`, stdout)
		require.Regexp(t, `(?m)^attempt\s+2 of 25$`, stdout)
		require.Contains(t, stdout, "\"url\": \"http://127.0.0.1:1/warm\"")
		require.Regexp(t, `(?m)^1\s+\S+ \S+\s+http.request: POST http://127.0.0.1:1/warm: connection refused$`, stdout)
		require.Regexp(t, `(?m)^2\s+\S+ \S+\s+http.request: POST .*timed out after 30s$`, stdout)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		stdout, stderr, code := enqueue(t, url, nil, "jobs", "get", "999999")
		require.Equal(t, 1, code, stderr)
		require.Empty(t, stdout)
		require.Equal(t, "enqueue: job 999999: not found", oneLine(t, stderr))
	})

	t.Run("BadID", func(t *testing.T) {
		t.Parallel()
		requireBadInput(t, url, `"abc" is not a job id`, "jobs", "get", "abc")
		requireBadInput(t, url, "exactly one job ID", "jobs", "get")
	})
}

func TestJobs_Actions(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		id := enqueueID(t, url, "ferry.noop", "--max-attempts", "2")
		failJob(t, pool, id, "discarded", "boom 1", "boom 2")

		var out []actionOut
		enqueueOK(t, url, &out, "jobs", "retry", strconv.FormatInt(id, 10))
		require.Equal(t, []actionOut{{ID: id, OK: true, State: "available"}}, out)
		j := getJob(t, pool, id)
		require.Equal(t, "available", j.State)
		require.Equal(t, 2, j.Errors, "retry keeps the errors")
		require.Equal(t, 3, j.MaxAttempts, "one more attempt")
		require.False(t, j.Finalized)
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		scheduled := enqueueID(t, url, "ferry.noop", "--in", "1h")
		done := enqueueID(t, url, "ferry.noop")
		failJob(t, pool, done, "completed")

		stdout, stderr, code := enqueue(t, url, nil, "jobs", "cancel", strconv.FormatInt(scheduled, 10), strconv.FormatInt(done, 10))
		require.Equal(t, 1, code, "a completed job cannot be cancelled")
		require.Equal(t, "enqueue: 1 of 2 jobs not cancelled", oneLine(t, stderr))
		require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+cancelled$`, scheduled), stdout, "the state is not said twice")
		require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+failed: already completed: not cancelled$`, done), stdout)
		require.Equal(t, "cancelled", getJob(t, pool, scheduled).State)
		require.Equal(t, "completed", getJob(t, pool, done).State)
	})

	t.Run("Delete", func(t *testing.T) {
		t.Parallel()
		a := enqueueID(t, url, "ferry.noop", "--queue", "deleteme")
		b := enqueueID(t, url, "ferry.noop", "--queue", "deleteme")

		var out []actionOut
		enqueueOK(t, url, &out, "jobs", "delete", strconv.FormatInt(a, 10), strconv.FormatInt(b, 10))
		require.Equal(t, []actionOut{{ID: a, OK: true}, {ID: b, OK: true}}, out)
		var n int
		require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job WHERE queue = 'deleteme'").Scan(&n))
		require.Zero(t, n)
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		id := enqueueID(t, url, "ferry.noop", "--queue", "notfound")
		stdout, stderr, code := enqueue(t, url, nil, "jobs", "delete", "999999", strconv.FormatInt(id, 10), "--json")
		require.Equal(t, 1, code, stderr)
		require.JSONEq(t, `{"error": "1 of 2 jobs not deleted", "exit_code": 1}`, oneLine(t, stderr))
		var out []actionOut
		require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
		require.Equal(t, []actionOut{{ID: 999999, Error: "not found"}, {ID: id, OK: true}}, out)
	})

	t.Run("BadID", func(t *testing.T) {
		t.Parallel()
		id := enqueueID(t, url, "ferry.noop", "--in", "1h")
		for _, verb := range []string{"retry", "cancel", "delete"} {
			requireBadInput(t, url, `"x1" is not a job id`, "jobs", verb, strconv.FormatInt(id, 10), "x1")
			requireBadInput(t, url, `"-3" is not a job id`, "jobs", verb, "--", "-3")
			requireBadInput(t, url, "one or more job ID", "jobs", verb)
		}
		require.Equal(t, "scheduled", getJob(t, pool, id).State, "nothing was done")
	})
}

func TestDead(t *testing.T) {
	t.Parallel()

	// setup makes a database with five discarded jobs (two ferry.noop in
	// default, two http.request in web, one ferry.noop in reports) and one
	// retryable ferry.noop in web; ids in that order.
	setup := func(t *testing.T) (string, *pgxpool.Pool, []int64) {
		t.Helper()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)
		bulkJSON(t, url,
			`{"kind":"ferry.noop","max_attempts":2}`,
			`{"kind":"ferry.noop","max_attempts":2}`,
			`{"kind":"http.request","args":{"url":"http://127.0.0.1:1/a"},"queue":"web","max_attempts":2}`,
			`{"kind":"http.request","args":{"url":"http://127.0.0.1:1/b"},"queue":"web","max_attempts":2}`,
			`{"kind":"ferry.noop","queue":"reports","max_attempts":2}`,
			`{"kind":"ferry.noop","queue":"web"}`,
		)
		ids := jobIDs(t, pool)
		require.Len(t, ids, 6)
		for i, id := range ids[:5] {
			failJob(t, pool, id, "discarded", fmt.Sprintf("job %d: first failure", i), fmt.Sprintf("job %d: last failure", i))
		}
		failJob(t, pool, ids[5], "retryable", "transient")
		return url, pool, ids
	}
	states := func(t *testing.T, pool *pgxpool.Pool, ids []int64) []string {
		t.Helper()
		out := make([]string, len(ids))
		for i, id := range ids {
			var s string
			err := pool.QueryRow(context.Background(), "SELECT state::text FROM river_job WHERE id = $1", id).Scan(&s)
			if err != nil {
				s = "gone"
			}
			out[i] = s
		}
		return out
	}

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		url, _, ids := setup(t)

		var out []jobOut
		enqueueOK(t, url, &out, "dead", "list")
		require.Equal(t, []int64{ids[4], ids[3], ids[2], ids[1], ids[0]}, listIDs(out))
		require.Len(t, out[0].Errors, 2)

		enqueueOK(t, url, &out, "dead", "list", "--kind", "http.request")
		require.Equal(t, []int64{ids[3], ids[2]}, listIDs(out))
		enqueueOK(t, url, &out, "dead", "list", "--queue", "web", "--limit", "1")
		require.Equal(t, []int64{ids[3]}, listIDs(out))

		stdout, stderr, code := enqueue(t, url, nil, "dead", "list", "--queue", "reports")
		require.Zero(t, code, stderr)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		require.Len(t, lines, 2)
		require.Equal(t, []string{"ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "FINALIZED", "LAST", "ERROR"}, strings.Fields(lines[0]))
		require.Regexp(t, fmt.Sprintf(`^%d\s+ferry.noop\s+reports\s+discarded\s+2/2\s+\S+ \S+\s+job 4: last failure$`, ids[4]), lines[1])

		requireBadInput(t, url, "flag provided but not defined", "dead", "list", "--state", "available")
	})

	t.Run("RetryByID", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)

		var out deadOut
		enqueueOK(t, url, &out, "dead", "retry", "--yes", strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[2], 10))
		require.Equal(t, deadOut{Count: 2, IDs: []int64{ids[0], ids[2]}, Skipped: []actionOut{}}, out)
		require.Equal(t, []string{"available", "discarded", "available", "discarded", "discarded", "retryable"}, states(t, pool, ids))
		j := getJob(t, pool, ids[0])
		require.Equal(t, 2, j.Errors, "retry keeps the error history")
		require.Equal(t, 2, j.Attempt)
		require.Equal(t, 3, j.MaxAttempts, "one more attempt")
		require.False(t, j.Finalized)
	})

	// Named ids need no --yes, on a terminal or not (the help's own
	// example); a filter does.
	t.Run("RetryByIDWithoutYes", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)

		stdout, stderr, code := enqueue(t, url, nil, "dead", "retry", strconv.FormatInt(ids[0], 10))
		require.Zero(t, code, stderr)
		require.Equal(t, "retried 1 dead letter", oneLine(t, stdout))
		require.Equal(t, "available", states(t, pool, ids)[0])
		stdout, stderr, code = enqueue(t, url, nil, "dead", "discard", strconv.FormatInt(ids[2], 10))
		require.Zero(t, code, stderr)
		require.Equal(t, "discarded 1 dead letter", oneLine(t, stdout))
		require.Equal(t, "gone", states(t, pool, ids)[2])
	})

	t.Run("RetryByKind", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)

		stdout, stderr, code := enqueue(t, url, nil, "dead", "retry", "--kind", "http.request", "--yes")
		require.Zero(t, code, stderr)
		require.Equal(t, "retried 2 dead letters", oneLine(t, stdout))
		require.Equal(t, []string{"discarded", "discarded", "available", "available", "discarded", "retryable"}, states(t, pool, ids))
	})

	t.Run("RetryNotDiscarded", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)

		stdout, stderr, code := enqueue(t, url, nil, "dead", "retry", "-y", strconv.FormatInt(ids[1], 10), strconv.FormatInt(ids[5], 10), "999999")
		require.Equal(t, 1, code, stderr)
		require.Equal(t, "enqueue: 2 of 3 jobs not retried", oneLine(t, stderr))
		require.Equal(t, fmt.Sprintf("retried 1 dead letter\njob %d: retryable, not a dead letter\njob 999999: not found\n", ids[5]), stdout)
		require.Equal(t, []string{"discarded", "available", "discarded", "discarded", "discarded", "retryable"}, states(t, pool, ids))
	})

	t.Run("DiscardByQueue", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)

		var out deadOut
		enqueueOK(t, url, &out, "dead", "discard", "--queue", "web", "--queue", "reports", "--yes")
		require.Equal(t, deadOut{Count: 3, IDs: []int64{ids[2], ids[3], ids[4]}, Skipped: []actionOut{}}, out)
		require.Equal(t, []string{"discarded", "discarded", "gone", "gone", "gone", "retryable"}, states(t, pool, ids),
			"the retryable job in web stays")
	})

	t.Run("DiscardByKindAndQueue", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)

		var out deadOut
		enqueueOK(t, url, &out, "dead", "discard", "--kind", "ferry.noop", "--queue", "reports", "--yes")
		require.Equal(t, 1, out.Count)
		require.Equal(t, []string{"discarded", "discarded", "discarded", "discarded", "gone", "retryable"}, states(t, pool, ids))
	})

	t.Run("DiscardAll", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)

		stdout, stderr, code := enqueue(t, url, nil, "dead", "discard", "--all", "--yes")
		require.Zero(t, code, stderr)
		require.Equal(t, "discarded 5 dead letters", oneLine(t, stdout))
		require.Equal(t, []string{"gone", "gone", "gone", "gone", "gone", "retryable"}, states(t, pool, ids))

		stdout, stderr, code = enqueue(t, url, nil, "dead", "discard", "--all", "--yes")
		require.Zero(t, code, stderr)
		require.Equal(t, "discarded 0 dead letters", oneLine(t, stdout), "nothing left is not a failure")
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		url, pool, ids := setup(t)
		id := strconv.FormatInt(ids[0], 10)

		for _, verb := range []string{"retry", "discard"} {
			// Not a terminal (tests' stdin never is) and no --yes.
			requireBadInput(t, url, "refusing without --yes when not on a terminal", "dead", verb, "--all")
			requireBadInput(t, url, "refusing without --yes when not on a terminal", "dead", verb, "--kind", "ferry.noop", "--json")
			requireBadInput(t, url, "give job ids, --kind, --queue or --all", "dead", verb, "--yes")
			requireBadInput(t, url, "not both", "dead", verb, id, "--all", "--yes")
			requireBadInput(t, url, "not both", "dead", verb, id, "--kind", "ferry.noop", "--yes")
			requireBadInput(t, url, "--all with --kind or --queue", "dead", verb, "--all", "--queue", "web", "--yes")
			requireBadInput(t, url, `"x" is not a job id`, "dead", verb, id, "x", "--yes")
			requireBadInput(t, url, "--queue", "dead", verb, "--queue", "Web", "--yes")
		}
		require.Equal(t, []string{"discarded", "discarded", "discarded", "discarded", "discarded", "retryable"}, states(t, pool, ids),
			"nothing changed")
	})
}
