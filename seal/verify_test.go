package seal_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/logtest"
	"github.com/ferryq/ferry/internal/testkit/pgtest"
	"github.com/ferryq/ferry/seal"
)

// effectArgs is a test kind whose effect is counted by job id.
type effectArgs struct {
	N    int     `json:"n"`
	Note string  `json:"note,omitempty"`
	F    float64 `json:"f,omitempty"`
}

func (effectArgs) Kind() string { return "seal_test.effect" }

type effectWorker struct {
	river.WorkerDefaults[effectArgs]
	mu   sync.Mutex
	ran  map[int64]int
	args map[int64]effectArgs // as the worker saw them
}

func (w *effectWorker) Work(_ context.Context, job *river.Job[effectArgs]) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ran[job.ID]++
	w.args[job.ID] = job.Args
	return nil
}

func (w *effectWorker) argsOf(id int64) effectArgs {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.args[id]
}

func (w *effectWorker) runs(id int64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ran[id]
}

func (w *effectWorker) total() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, c := range w.ran {
		n += c
	}
	return n
}

var queueSeq atomic.Int64

type testBundle struct {
	pool     *pgxpool.Pool
	keys     *seal.Keys
	queue    string
	worker   *effectWorker
	verifier *seal.Verifier
	client   *river.Client[pgx.Tx] // works queue; seals and verifies with keys
	plain    *river.Client[pgx.Tx] // inserts without a seal
	logs     *logtest.Recorder
	events   <-chan *river.Event
}

// setup starts a River client that seals with keys and verifies with
// verifyKeys (keys when nil), working a queue of its own.
func setup(t *testing.T, keys, verifyKeys *seal.Keys) *testBundle {
	t.Helper()
	if verifyKeys == nil {
		verifyKeys = keys
	}
	pool := pgtest.Pool(t)
	b := &testBundle{
		pool:   pool,
		keys:   keys,
		queue:  fmt.Sprintf("seal_%d", queueSeq.Add(1)),
		worker: &effectWorker{ran: map[int64]int{}, args: map[int64]effectArgs{}},
		logs:   &logtest.Recorder{},
	}
	var err error
	b.verifier, err = seal.NewVerifier(seal.VerifierConfig{Keys: verifyKeys, DB: pool, Logger: b.logs.Logger()})
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, b.worker)
	b.client, err = river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Middleware:        []rivertype.Middleware{seal.Middleware(keys), b.verifier},
		Queues:            map[string]river.QueueConfig{b.queue: {MaxWorkers: 4}},
		TestOnly:          true,
		Workers:           workers,
	})
	require.NoError(t, err)
	b.plain, err = river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	events, cancel := b.client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	t.Cleanup(cancel)
	b.events = events
	require.NoError(t, b.client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, b.client.Stop(ctx))
	})
	return b
}

// wait waits for the first attempt of job id to end and returns the job as
// stored.
func (b *testBundle) wait(t *testing.T, id int64) *rivertype.JobRow {
	t.Helper()
	timeout := time.After(time.Minute) // a watchdog: the attempt ends in milliseconds
	for {
		select {
		case ev := <-b.events:
			if ev.Job.ID != id {
				continue
			}
			job, err := b.client.JobGet(t.Context(), id)
			require.NoError(t, err)
			return job
		case <-timeout:
			t.Fatalf("job %d did not finish an attempt", id)
		}
	}
}

// get returns job id as stored now.
func (b *testBundle) get(t *testing.T, id int64) *rivertype.JobRow {
	t.Helper()
	job, err := b.client.JobGet(t.Context(), id)
	require.NoError(t, err)
	return job
}

// requireRefused checks that job was discarded for reason, never worked,
// and logged.
func (b *testBundle) requireRefused(t *testing.T, job *rivertype.JobRow, reason seal.Reason) {
	t.Helper()
	require.Equal(t, rivertype.JobStateDiscarded, job.State, "a refused job is a dead letter at once")
	require.Len(t, job.Errors, 1, "never retried")
	require.Regexp(t, `^ferry: seal: job refused \(`+string(reason)+`\): `, job.Errors[0].Error)
	require.Zero(t, b.worker.runs(job.ID), "a refused job never runs")
	var found bool
	for _, rec := range b.logs.All("seal: job refused") {
		if rec["job_id"] == float64(job.ID) {
			require.Equal(t, string(reason), rec["reason"])
			require.Equal(t, job.Kind, rec["kind"])
			found = true
		}
	}
	require.True(t, found, "seal: job refused logged for job %d", job.ID)
	require.NotContains(t, b.logs.String(), "\"m\":", "no MAC or key in logs")
}

// insertTx inserts args in a transaction, runs alter on the new job in it,
// and commits.
func (b *testBundle) insertTx(t *testing.T, c *river.Client[pgx.Tx], args river.JobArgs, opts *river.InsertOpts, alter string) int64 {
	t.Helper()
	ctx := t.Context()
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	res, err := c.InsertTx(ctx, tx, args, opts)
	require.NoError(t, err)
	if alter != "" {
		_, err = tx.Exec(ctx, alter, res.Job.ID)
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
	return res.Job.ID
}

func TestVerifier(t *testing.T) {
	t.Parallel()

	t.Run("SealedRunsOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)), nil)
		id := b.insertTx(t, b.client, effectArgs{N: 1, Note: "é <&>", F: 1.5}, &river.InsertOpts{Queue: b.queue}, "")
		job := b.wait(t, id)
		require.Equal(t, rivertype.JobStateCompleted, job.State)
		require.Equal(t, 1, b.worker.runs(id))
		require.Empty(t, b.logs.All("seal: job refused"))
	})

	t.Run("PlantedUnsealed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)), nil)
		id := b.insertTx(t, b.plain, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue}, "")
		b.requireRefused(t, b.wait(t, id), seal.ReasonMissing)
		require.EqualValues(t, 1, b.verifier.Refused(seal.ReasonMissing))
		require.False(t, b.verifier.LastMissing().IsZero())
	})

	t.Run("AlteredArgs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)), nil)
		id := b.insertTx(t, b.client, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue},
			`UPDATE river_job SET args = jsonb_set(args, '{n}', '2') WHERE id = $1`)
		b.requireRefused(t, b.wait(t, id), seal.ReasonInvalid)
	})

	t.Run("AlteredKind", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)), nil)
		// A job of another kind, sealed, turned into this kind.
		sealer, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(b.keys)}})
		require.NoError(t, err)
		id := b.insertTx(t, sealer, otherArgs{N: 1}, &river.InsertOpts{Queue: b.queue},
			`UPDATE river_job SET kind = 'seal_test.effect' WHERE id = $1`)
		b.requireRefused(t, b.wait(t, id), seal.ReasonInvalid)
	})

	t.Run("QueueMoved", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)), nil)
		id := b.insertTx(t, b.client, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue + "_parked"},
			fmt.Sprintf(`UPDATE river_job SET queue = '%s' WHERE id = $1`, b.queue))
		b.requireRefused(t, b.wait(t, id), seal.ReasonQueue)
	})

	t.Run("CopyUnderAnotherID", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)), nil)
		id := b.insertTx(t, b.client, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue}, "")
		require.Equal(t, rivertype.JobStateCompleted, b.wait(t, id).State)
		var copyID int64
		require.NoError(t, b.pool.QueryRow(t.Context(), `
			INSERT INTO river_job (args, kind, max_attempts, metadata, queue, priority, state)
			SELECT args, kind, max_attempts, metadata, queue, priority, 'available' FROM river_job WHERE id = $1
			RETURNING id`, id).Scan(&copyID))
		b.requireRefused(t, b.wait(t, copyID), seal.ReasonReplayed)
		require.Equal(t, 1, b.worker.runs(id), "the original ran once")
	})

	t.Run("Stale", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)), nil)
		id := b.insertTx(t, b.client, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue, ScheduledAt: time.Now().Add(-seal.DefaultReplayWindow - time.Hour)}, "")
		b.requireRefused(t, b.wait(t, id), seal.ReasonStale)
	})

	t.Run("SealFromAnotherKey", func(t *testing.T) {
		t.Parallel()
		other := mustKeys(t, newKey(t))
		b := setup(t, mustKeys(t, newKey(t)), nil)
		forger, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(other)}})
		require.NoError(t, err)
		id := b.insertTx(t, forger, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue}, "")
		b.requireRefused(t, b.wait(t, id), seal.ReasonInvalid)
	})

	t.Run("EncryptedRoundTrip", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)).WithEncryption(true), nil)
		want := effectArgs{N: 42, Note: "personal: é <&>", F: 2.5}
		id := b.insertTx(t, b.client, want, &river.InsertOpts{Queue: b.queue}, "")
		var stored string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT args::text FROM river_job WHERE id = $1`, id).Scan(&stored))
		require.Contains(t, stored, seal.EnvelopeKey)
		require.NotContains(t, stored, "personal", "the args are stored encrypted")
		require.Equal(t, rivertype.JobStateCompleted, b.wait(t, id).State)
		require.Equal(t, want, b.worker.argsOf(id), "the worker sees the args as inserted")
		require.Equal(t, true, sealOf(t, b.get(t, id))["e"])
	})

	t.Run("EncryptedEnvelopeSwapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, mustKeys(t, newKey(t)).WithEncryption(true), nil)
		// Another job's envelope in this one's args: its MAC fails first;
		// and were the MAC's args forged, the envelope's additional data
		// (kind, queue, run id) would not open.
		other := b.insertTx(t, b.client, effectArgs{N: 666}, &river.InsertOpts{Queue: b.queue + "_parked"}, "")
		id := b.insertTx(t, b.client, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue},
			fmt.Sprintf(`UPDATE river_job SET args = (SELECT args FROM river_job WHERE id = %d) WHERE id = $1`, other))
		b.requireRefused(t, b.wait(t, id), seal.ReasonInvalid)
	})

	t.Run("Rotation", func(t *testing.T) {
		t.Parallel()
		oldKey, newK := newKey(t), newKey(t)
		oldKeys, rotated := mustKeys(t, oldKey), mustKeys(t, newK+","+oldKey)
		b := setup(t, rotated, nil)
		oldInserter, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(oldKeys)}})
		require.NoError(t, err)

		oldID := b.insertTx(t, oldInserter, effectArgs{N: 1}, &river.InsertOpts{Queue: b.queue}, "")
		require.Equal(t, rivertype.JobStateCompleted, b.wait(t, oldID).State, "the old key still verifies")
		newID := b.insertTx(t, b.client, effectArgs{N: 2}, &river.InsertOpts{Queue: b.queue}, "")
		newJob := b.wait(t, newID)
		require.Equal(t, rivertype.JobStateCompleted, newJob.State)
		require.Equal(t, rotated.IDs()[0], sealOf(t, newJob)["k"], "the new key seals")
		require.NotEqual(t, oldKeys.IDs()[0], rotated.IDs()[0])

		// Once the old key is dropped, what it sealed no longer verifies.
		dropped, err := seal.NewVerifier(seal.VerifierConfig{Keys: mustKeys(t, newK), DB: b.pool})
		require.NoError(t, err)
		oldJob, err := b.client.JobGet(t.Context(), oldID)
		require.NoError(t, err)
		refusal, err := dropped.Check(t.Context(), oldJob)
		require.NoError(t, err)
		require.NotNil(t, refusal)
		require.Equal(t, seal.ReasonInvalid, refusal.Reason)
	})
}

type otherArgs struct {
	N int `json:"n"`
}

func (otherArgs) Kind() string { return "seal_test.other" }

func sealOf(t *testing.T, job *rivertype.JobRow) map[string]any {
	t.Helper()
	var meta map[string]map[string]any
	require.NoError(t, json.Unmarshal(job.Metadata, &meta))
	require.NotNil(t, meta[seal.MetadataKey], "job %d is sealed", job.ID)
	return meta[seal.MetadataKey]
}

// TestVerifier_Check: a job's own retry passes its claim, a copy does not,
// whichever comes first.
func TestVerifier_Check(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	keys := mustKeys(t, newKey(t))
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(keys)}})
	require.NoError(t, err)
	v, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys, DB: pool})
	require.NoError(t, err)
	ctx := t.Context()
	queue := fmt.Sprintf("seal_check_%d", queueSeq.Add(1))

	res, err := ins.Insert(ctx, effectArgs{N: 7}, &river.InsertOpts{Queue: queue})
	require.NoError(t, err)
	var copyID int64
	require.NoError(t, pool.QueryRow(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, metadata, queue, priority, state)
		SELECT args, kind, max_attempts, metadata, queue, priority, 'available' FROM river_job WHERE id = $1
		RETURNING id`, res.Job.ID).Scan(&copyID))
	cp, err := ins.JobGet(ctx, copyID)
	require.NoError(t, err)
	orig, err := ins.JobGet(ctx, res.Job.ID)
	require.NoError(t, err)

	// The copy starts first: it takes the run id, and the original is the
	// one refused. Either way exactly one of them runs.
	refusal, err := v.Check(ctx, cp)
	require.NoError(t, err)
	require.Nil(t, refusal)
	refusal, err = v.Check(ctx, cp)
	require.NoError(t, err)
	require.Nil(t, refusal, "a retry of the job that holds the claim passes")
	refusal, err = v.Check(ctx, orig)
	require.NoError(t, err)
	require.NotNil(t, refusal)
	require.Equal(t, seal.ReasonReplayed, refusal.Reason)

	// After the window, the claimant's retry still passes; nothing else does.
	late, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys, DB: pool, Now: func() time.Time { return time.Now().Add(seal.DefaultReplayWindow + time.Hour) }})
	require.NoError(t, err)
	refusal, err = late.Check(ctx, cp)
	require.NoError(t, err)
	require.Nil(t, refusal)
	refusal, err = late.Check(ctx, orig)
	require.NoError(t, err)
	require.Equal(t, seal.ReasonReplayed, refusal.Reason)
}
