package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestJobsRescue: `enqueue jobs rescue` takes back a job whose worker was
// killed, without waiting for a leader, and refuses a job on a live worker.
func TestJobsRescue(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	// The only worker, killed while it runs a job: no leader is left to
	// rescue it, only the operator.
	orphan := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"1h"}`)
	a := startWorker(t, url, nil, electionArgs(time.Second)...)
	waitJobState(t, pool, orphan, "running", 10*time.Second)
	require.NoError(t, a.Kill())
	// The test takes the leader lock as soon as the killed worker's session
	// frees it, so the next worker stays a standby: its rescuer, a leader's,
	// would otherwise take the orphan back before the operator does (CI saw
	// it on a loaded machine).
	lockConn, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	defer lockConn.Release()
	_, err = lockConn.Exec(t.Context(), "SELECT pg_advisory_lock($1)", election.KeyElection)
	require.NoError(t, err)
	defer func() { _, _ = lockConn.Exec(context.Background(), "SELECT pg_advisory_unlock_all()") }()

	// A job running on a live worker.
	kept := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"1h"}`, "--queue", "slow")
	b := startWorker(t, url, nil, append(electionArgs(time.Hour), "--queues", "slow=1")...)
	waitJobState(t, pool, kept, "running", 10*time.Second)

	stdout, stderr, code := enqueue(t, url, nil, "jobs", "rescue", fmt.Sprint(orphan), fmt.Sprint(kept), "--json")
	require.Equal(t, 1, code, "one of two not rescued; stderr: %s", stderr)
	var results []struct {
		ID    int64  `json:"id"`
		OK    bool   `json:"ok"`
		State string `json:"state"`
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &results), stdout)
	require.Len(t, results, 2)
	require.True(t, results[0].OK, "%+v", results[0])
	require.Contains(t, []string{"available", "running"}, results[0].State)
	require.False(t, results[1].OK)
	require.Contains(t, results[1].Error, "running on live worker")
	require.Equal(t, "running", getJob(t, pool, kept).State, "a live worker's job is left alone")
	j := getJob(t, pool, orphan)
	require.Contains(t, []string{"available", "running"}, j.State)
	require.Equal(t, 1, j.Errors, "the rescue is recorded in the job's errors")
	require.NoError(t, b.Kill())
}

// TestJobsRescue_RiverLeader: `enqueue jobs rescue` of a job whose dead
// worker led River resigns that leadership, as the leader's rescuer does,
// and says so.
func TestJobsRescue_RiverLeader(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	orphan := enqueueID(t, url, "ferry.noop", "--args", `{"sleep":"1h"}`)
	a := startWorker(t, url, nil, electionArgs(time.Second)...)
	aID := workerClientID(t, a)
	waitJobState(t, pool, orphan, "running", 10*time.Second)
	waitRiverLeader(t, pool, aID)
	require.NoError(t, a.Kill())
	// The operator rescues a dead worker's job: Postgres has ended the
	// killed worker's sessions (while one is still connected, the rescue
	// rightly refuses; CI saw it a few milliseconds after the kill).
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM pg_stat_activity a JOIN ferry_worker w
			ON a.datname = current_database() AND right(a.application_name, length(w.session_tag)) = w.session_tag
			WHERE w.client_id = $1`, aID) == 0
	}, 10*time.Second, 10*time.Millisecond, "the killed worker's sessions end")

	// No other River client runs: River's leadership stays A's until
	// someone resigns it.
	stdout, stderr, code := enqueue(t, url, nil, "jobs", "rescue", fmt.Sprint(orphan), "--json")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	var results []struct {
		OK   bool   `json:"ok"`
		Note string `json:"note"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &results), stdout)
	require.Len(t, results, 1)
	require.True(t, results[0].OK, "%+v", results[0])
	require.Contains(t, results[0].Note, "River leadership resigned")
	require.Zero(t, count(t, pool, "SELECT count(*) FROM river_leader"), "A's River leadership is gone")
}
