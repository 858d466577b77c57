package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// TestEnqueue_QueueFull: `enqueue job` and `enqueue bulk` into a full queue
// exit 3 with one line naming the queue and its bound, and insert nothing.
func TestEnqueue_QueueFull(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	_, err := jobs.SetQueueBounds(context.Background(), pool, []jobs.QueueBound{{Name: "reports", MaxLength: 150}})
	require.NoError(t, err)

	line := `{"kind":"ferry.noop","queue":"reports"}`
	lines := func(n int) []string { return strings.Split(strings.Repeat(line+"\n", n), "\n")[:n] }

	// Bulk over the bound: the whole file is refused, though its first
	// chunk (a COPY of 100) fits.
	_, stderr, code := enqueue(t, url, strings.NewReader(strings.Join(lines(200), "\n")), "bulk", "--file", "-", "--batch-size", "100")
	require.Equal(t, 3, code, stderr)
	requireQueueFullLine(t, stderr)
	require.Zero(t, countJobs(t, pool))

	// Up to the bound fits.
	require.Equal(t, 150, bulkJSON(t, url, lines(150)...).Inserted)

	_, stderr, code = enqueue(t, url, nil, "job", "ferry.noop", "--queue", "reports")
	require.Equal(t, 3, code, stderr)
	requireQueueFullLine(t, stderr)
	require.Equal(t, 150, countJobs(t, pool))

	_, stderr, code = enqueue(t, url, strings.NewReader(line+"\n"), "bulk", "--file", "-")
	require.Equal(t, 3, code, stderr)
	requireQueueFullLine(t, stderr)
	require.Equal(t, 150, countJobs(t, pool))

	_, stderr, code = enqueue(t, url, nil, "job", "ferry.noop", "--queue", "reports", "--json")
	require.Equal(t, 3, code, stderr)
	var jerr struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	require.NoError(t, json.Unmarshal([]byte(stderr), &jerr), stderr)
	require.Equal(t, 3, jerr.ExitCode)
	require.Contains(t, jerr.Error, "queue full")

	// A dead letter retried into the full queue (River's JobRetry, which
	// passes the database's refusal on as it is): exit 3, still dead.
	var dead int64
	require.NoError(t, pool.QueryRow(context.Background(), `
		INSERT INTO river_job (args, kind, max_attempts, attempt, queue, state, finalized_at)
		VALUES ('{}', 'ferry.noop', 1, 1, 'reports', 'discarded', now()) RETURNING id`).Scan(&dead))
	for _, cmd := range [][]string{{"dead", "retry", "--yes", fmt.Sprint(dead)}, {"jobs", "retry", fmt.Sprint(dead)}} {
		_, stderr, code = enqueue(t, url, nil, cmd...)
		require.Equal(t, 3, code, "%v: %s", cmd, stderr)
		line := oneLine(t, stderr)
		require.Contains(t, line, "queue full")
		require.Contains(t, line, "reports")
		require.Contains(t, line, "at most 150")
		var state string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE id = $1`, dead).Scan(&state))
		require.Equal(t, "discarded", state)
	}

	// Another queue is not affected.
	_, stderr, code = enqueue(t, url, nil, "job", "ferry.noop", "--queue", "other")
	require.Zero(t, code, stderr)
}

func requireQueueFullLine(t *testing.T, stderr string) {
	t.Helper()
	line := oneLine(t, stderr)
	require.Contains(t, line, "queue full")
	require.Contains(t, line, `"reports"`)
	require.Contains(t, line, "at most 150")
}
