package liveness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
)

// settler starts a Worker with a Ledger, a 200 ms heartbeat and a short
// SettleAfter.
func (b *testBundle) settler(t *testing.T, ledger *Ledger, after time.Duration, reg prometheus.Registerer, logs *logtest.Recorder) *Worker {
	t.Helper()
	w, err := New(Config{
		DatabaseURL: b.url, ClientID: fmt.Sprintf("test-%d", b.seq.Add(1)),
		Tick: 200 * time.Millisecond, TickTimeout: time.Second, Ledger: ledger, Pool: b.pool, SettleAfter: after,
		Logger: logs.Logger(), Registerer: reg,
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	return w
}

// settledReason is the job's state and the reason settle recorded ("" when
// it did not touch it).
func (b *testBundle) settledReason(t *testing.T, id int64) (state string, attempt int, reason string) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT state::text, attempt, coalesce(metadata->>'ferry_settled', '')
		FROM river_job WHERE id = $1`, id).Scan(&state, &attempt, &reason))
	return state, attempt, reason
}

// A job whose fetch committed but whose reply never reached the worker (a
// primary failover between the two) runs nowhere: the live worker gives it
// back, its attempt with it, once it is older than SettleAfter; a job of
// another worker is not its business.
func TestLedger_NeverStartedJobGivenBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	reg := prometheus.NewRegistry()
	logs := &logtest.Recorder{}
	w := b.settler(t, NewLedger(), time.Second, reg, logs)

	// River's own fetch, under the worker's client id, whose reply is lost.
	var lost int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		VALUES ('{}', 'ferry.noop', 25, 'default', 'available', now()) RETURNING id`).Scan(&lost))
	b.refetch(t, lost, w.ClientID())
	other := b.running(t, "another-worker", 1, 25)

	require.Eventually(t, func() bool {
		state, _, _ := b.settledReason(t, lost)
		return state == "available"
	}, 10*time.Second, 50*time.Millisecond)
	state, attempt, reason := b.settledReason(t, lost)
	require.Equal(t, "available", state)
	require.Equal(t, 0, attempt, "the attempt that never ran is given back")
	require.Equal(t, "never started", reason)
	// The log line and the count come once the pass has returned, after
	// its UPDATE committed.
	require.Eventually(t, func() bool { return len(logs.All("liveness: stray jobs settled")) > 0 }, 5*time.Second, 10*time.Millisecond)
	line := logs.Find(t, "liveness: stray jobs settled")
	require.EqualValues(t, 1, line["never_started"])
	require.InDelta(t, 1, testutil.ToFloat64(w.mSettled.WithLabelValues("never_started")), 0)

	state, _, reason = b.settledReason(t, other)
	require.Equal(t, "running", state)
	require.Empty(t, reason)
}

type ledgerArgs struct {
	Outcome string `json:"outcome"`
}

func (ledgerArgs) Kind() string { return "liveness.ledger_test" }

// A worker's outcome whose completion River could not write is written by
// the worker's heartbeat once SettleAfter has passed: a success completed,
// a failure retryable with its error. A job still running is never
// touched, however long it runs. River's completion is refused here by a
// trigger for River's sessions only (the fault: a database that would not
// take the write), and the real River client ran the jobs.
func TestLedger_LostCompletionsWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	reg := prometheus.NewRegistry()
	logs := &logtest.Recorder{}
	ledger := NewLedger()
	w := b.settler(t, ledger, time.Second, reg, logs)

	_, err := b.pool.Exec(ctx, `CREATE FUNCTION refuse_river_completion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF current_setting('application_name') LIKE 'river-under-test%' AND NEW.args->>'outcome' IN ('ok', 'fail') THEN
        RAISE EXCEPTION 'completion refused by the test';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_river_completion BEFORE UPDATE ON river_job FOR EACH ROW
    WHEN (OLD.state = 'running' AND NEW.state <> 'running') EXECUTE FUNCTION refuse_river_completion()`)
	require.NoError(t, err)

	release := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[ledgerArgs]) error {
		switch job.Args.Outcome {
		case "fail":
			return errors.New("the receiver said no")
		case "long":
			<-release
		}
		return nil
	}))
	pc, err := pgxpool.ParseConfig(b.url)
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["application_name"] = "river-under-test"
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	client := ledgerClient(t, pool, w.ClientID(), logs.Logger(), ledger, 5, workers)
	ids := map[string]int64{}
	for _, o := range []string{"ok", "fail", "long"} {
		res, err := client.Insert(ctx, ledgerArgs{Outcome: o}, nil)
		require.NoError(t, err)
		ids[o] = res.Job.ID
	}
	startClient(t, ctx, client, func() { close(release) })

	require.Eventually(t, func() bool {
		okState, _, _ := b.settledReason(t, ids["ok"])
		failState, _, _ := b.settledReason(t, ids["fail"])
		return okState == "completed" && failState == "retryable"
	}, 20*time.Second, 50*time.Millisecond)
	_, _, reason := b.settledReason(t, ids["ok"])
	require.Equal(t, "completion lost", reason)
	var attempt int
	var lastErr string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT attempt, errors[cardinality(errors)]->>'error' FROM river_job WHERE id = $1`, ids["fail"]).Scan(&attempt, &lastErr))
	require.Equal(t, 1, attempt)
	require.Equal(t, "the receiver said no", lastErr)
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(w.mSettled.WithLabelValues("completed")) == 1 && testutil.ToFloat64(w.mSettled.WithLabelValues("failed")) == 1
	}, 5*time.Second, 10*time.Millisecond, "counted once the pass returned")

	// The long job has been running for well past SettleAfter: untouched.
	time.Sleep(1500 * time.Millisecond)
	state, _, reason := b.settledReason(t, ids["long"])
	require.Equal(t, "running", state)
	require.Empty(t, reason)
	require.Equal(t, 1, ledger.Len(), "only the running job is held")
}

// A worker without its liveness session cannot settle; its Ledger forgets
// what finished long ago rather than grow.
func TestLedger_Forget(t *testing.T) {
	t.Parallel()
	l := NewLedger()
	l.started(1, 1, nil)
	l.finished(1, 1, nil)
	l.started(2, 1, nil)
	l.finished(2, 1, nil)
	l.started(3, 1, nil) // still running
	l.jobs[1].doneAt = time.Now().Add(-time.Hour)
	l.forget(time.Now().Add(-time.Minute))
	require.Equal(t, 2, l.Len())
	_, gone := l.jobs[1]
	require.False(t, gone)
}

// A finished job leaves the Ledger as soon as River's client reports its
// outcome written (Config.Subscribe), not at a settle pass: with a
// SettleAfter of an hour no pass may drop it, and every job the client
// worked is gone from the Ledger once worked.
func TestLedger_FollowsRiversWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ledger := NewLedger()
	clientID := fmt.Sprintf("test-%d", b.seq.Add(1))
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[ledgerArgs]) error {
		if job.Args.Outcome == "fail" {
			return errors.New("the receiver said no")
		}
		return nil
	}))
	client := ledgerClient(t, b.pool, clientID, (&logtest.Recorder{}).Logger(), ledger, 10, workers)
	w, err := New(Config{
		DatabaseURL: b.url, ClientID: clientID, Tick: 200 * time.Millisecond, TickTimeout: time.Second,
		Ledger: ledger, Subscribe: client.SubscribeConfig, Pool: b.pool, SettleAfter: time.Hour,
		Logger: (&logtest.Recorder{}).Logger(),
	})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(w.Stop)

	var ids []int64
	for i := range 50 {
		outcome := "ok"
		if i%10 == 0 {
			outcome = "fail"
		}
		res, err := client.Insert(ctx, ledgerArgs{Outcome: outcome}, nil)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	startClient(t, ctx, client, nil)
	require.Eventually(t, func() bool {
		var left int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state IN ('available', 'running')`, ids).Scan(&left))
		return left == 0
	}, 20*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return ledger.Len() == 0 }, 5*time.Second, 10*time.Millisecond,
		"every job River wrote is dropped from the Ledger")
}

// Without River's report (no Subscribe, or an event dropped), a finished
// job stays in the Ledger until a settle pass reads it by id, once it is
// older than SettleAfter: River's client completed it, so it is no longer
// running and is forgotten, and nothing is written over River's outcome.
func TestLedger_UnreportedFinishedJobForgotten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	ledger := NewLedger()
	w := b.settler(t, ledger, time.Second, nil, &logtest.Recorder{})
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[ledgerArgs]) error { return nil }))
	client := ledgerClient(t, b.pool, w.ClientID(), (&logtest.Recorder{}).Logger(), ledger, 1, workers)
	res, err := client.Insert(ctx, ledgerArgs{Outcome: "ok"}, nil)
	require.NoError(t, err)
	startClient(t, ctx, client, nil)
	require.Eventually(t, func() bool {
		state, _, _ := b.settledReason(t, res.Job.ID)
		return state == "completed"
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return ledger.Len() == 0 }, 10*time.Second, 20*time.Millisecond)
	_, _, reason := b.settledReason(t, res.Job.ID)
	require.Empty(t, reason, "River's outcome stands")
}

// ledgerClient is a River client with the Ledger's middleware, named id,
// working workers on the default queue with maxWorkers.
func ledgerClient(t *testing.T, pool *pgxpool.Pool, id string, logger *slog.Logger, ledger *Ledger, maxWorkers int, workers *river.Workers) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID: id, Logger: logger, Middleware: []rivertype.Middleware{ledger.Middleware()},
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}}, Workers: workers,
		TestOnly: true,
	})
	require.NoError(t, err)
	return client
}

// startClient starts client and stops it when the test ends, after
// before (when given) has run.
func startClient(t *testing.T, ctx context.Context, client *river.Client[pgx.Tx], before func()) {
	t.Helper()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		if before != nil {
			before()
		}
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.Stop(sctx)
	})
}
