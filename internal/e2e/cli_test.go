package e2e_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// TestCLI_JSON: version answers --json; under --json a failure is a JSON
// object on stderr, with the exit code; leader with no holder exits 1.
func TestCLI_JSON(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)

	var v struct {
		Version string `json:"version"`
	}
	enqueueOK(t, url, &v, "version")
	require.NotEmpty(t, v.Version)

	stdout, stderr, code := enqueue(t, url, nil, "jobs", "get", "999999", "--json")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	require.JSONEq(t, `{"error": "job 999999: not found", "exit_code": 1}`, oneLine(t, stderr))

	stdout, stderr, code = enqueue(t, url, nil, "jobs", "get", "x", "--json")
	require.Equal(t, 2, code, stderr)
	require.Empty(t, stdout)
	require.JSONEq(t, `{"error": "\"x\" is not a job id", "exit_code": 2}`, oneLine(t, stderr))

	stdout, stderr, code = enqueue(t, url, nil, "leader")
	require.Equal(t, 1, code, "no leader")
	require.Empty(t, stdout)
	require.Equal(t, "enqueue: no process holds the leader lock (key 911000001)", oneLine(t, stderr))

	stdout, stderr, code = enqueue(t, url, nil, "leader", "--json")
	require.Equal(t, 1, code, "no leader")
	require.JSONEq(t, `{"leader": null}`, stdout)
	require.JSONEq(t, `{"error": "no process holds the leader lock (key 911000001)", "exit_code": 1}`, oneLine(t, stderr))
}

// TestCLI_NotMigrated: every command that reads or writes ferry's tables
// says, on a database without migrations, to run `worker migrate up`.
func TestCLI_NotMigrated(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, false)

	for _, args := range [][]string{
		{"job", "ferry.noop"},
		{"job", "app.report"},
		{"jobs", "list"},
		{"jobs", "cancel", "1"},
		{"dead", "list"},
		{"outbox", "add", "order.placed"},
		{"outbox", "stats"},
		{"schedule", "list"},
		{"leader"},
		{"workers"},
	} {
		stdout, stderr, code := enqueue(t, url, nil, args...)
		require.Equal(t, 1, code, "enqueue %s: %s", strings.Join(args, " "), stderr)
		require.Empty(t, stdout, "enqueue %s", strings.Join(args, " "))
		line := oneLine(t, stderr)
		require.Contains(t, line, "the database is not migrated to this build", "enqueue %s", strings.Join(args, " "))
		require.Contains(t, line, "run `worker migrate up` first", "enqueue %s", strings.Join(args, " "))
	}
}

// TestEnqueue_QueueNobodyWorks: a job put in a queue that no live worker
// works is inserted with a warning; once a worker works the queue (it has
// completed a job of it), there is none.
func TestEnqueue_QueueNobodyWorks(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	stdout, stderr, code := enqueue(t, url, nil, "job", "ferry.noop", "--queue", "reports")
	require.Zero(t, code, stderr)
	id, err := strconv.ParseInt(strings.TrimSpace(oneLine(t, stdout)), 10, 64)
	require.NoError(t, err, stdout)
	require.Equal(t, fmt.Sprintf(`enqueue: warning: no live worker works queue "reports" (none has reported it in river_queue for 11m0s): job %d waits until one does`, id),
		oneLine(t, stderr))
	require.Equal(t, "available", getJob(t, pool, id).State, "the insert stands")

	w := startWorker(t, url, nil, "--queues", "reports=1")
	waitJobState(t, pool, id, "completed", deadWatchdog)
	stdout, stderr, code = enqueue(t, url, nil, "job", "ferry.noop", "--queue", "reports")
	require.Zero(t, code, stderr)
	require.Empty(t, stderr, "a live worker works reports")
	id, err = strconv.ParseInt(strings.TrimSpace(oneLine(t, stdout)), 10, 64)
	require.NoError(t, err, stdout)
	waitJobState(t, pool, id, "completed", deadWatchdog)
	stop(t, w, stopTimeout)
}

// TestCLI_ErrorTexts: an oversized args file is reported with its size; a
// refused connection is said once, without the password.
func TestCLI_ErrorTexts(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	big := writeFile(t, "big.json", `{"x":"`+strings.Repeat("a", 200_004)+`"}`)
	stdout, stderr, code := enqueue(t, url, nil, "job", "ferry.noop", "--args", "@"+big)
	require.Equal(t, 2, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, fmt.Sprintf("enqueue: --args: %s is 200012 bytes, over the 65536 byte limit", big), oneLine(t, stderr))

	stdout, stderr, code = enqueue(t, url, strings.NewReader(`{"x":"`+strings.Repeat("a", 200_004)+`"}`), "job", "ferry.noop", "--args", "-")
	require.Equal(t, 2, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, "enqueue: --args: stdin is more than 65536 bytes, over the 65536 byte limit", oneLine(t, stderr))
	require.Zero(t, countJobs(t, pool), "nothing written")

	// sslmode=prefer: pgx tries twice (TLS, then plain), both refused.
	port := freePort(t)
	refused := fmt.Sprintf("postgres://ferry:s3cretpw@127.0.0.1:%d/ferry", port)
	stdout, stderr, code = enqueue(t, refused, nil, "jobs", "list")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, fmt.Sprintf("enqueue: connect to database 127.0.0.1:%d: connection refused", port), oneLine(t, stderr))

	stdout, stderr, code = proctest.Run(t, bins(t).worker, env(refused), nil, "run", "--admin-addr", "off")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, "worker: ferry: connect to database 127.0.0.1/ferry: connection refused", oneLine(t, stderr))
}
