package seal_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
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

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
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
	// As a worker with keys does at start (ferry.Server.Run).
	_, err := seal.Arm(t.Context(), pool)
	require.NoError(t, err)
	b.verifier, err = seal.NewVerifier(seal.VerifierConfig{Keys: verifyKeys, Logger: b.logs.Logger()})
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
		copyID := copyJob(t, b.pool, id)
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
		require.Equal(t, rotated.IDs()[0][:4], sealOf(t, newJob)["k"], "the new key seals")
		require.NotEqual(t, oldKeys.IDs()[0], rotated.IDs()[0])

		// Once the old key is dropped, what it sealed no longer verifies.
		dropped, err := seal.NewVerifier(seal.VerifierConfig{Keys: mustKeys(t, newK)})
		require.NoError(t, err)
		oldJob, err := b.client.JobGet(t.Context(), oldID)
		require.NoError(t, err)
		refusal := dropped.Check(oldJob)
		require.NotNil(t, refusal)
		require.Equal(t, seal.ReasonInvalid, refusal.Reason)
	})
}

type otherArgs struct {
	N int `json:"n"`
}

func (otherArgs) Kind() string { return "seal_test.other" }

// sealOf reads job's seal tag, a version-3 string
// ("3[e].<key id prefix>.<run id>.<due>.<mac>.<queue>"), into its named fields.
func sealOf(t *testing.T, job *rivertype.JobRow) map[string]any {
	t.Helper()
	text, ok := seal.Tag(job.Tags)
	require.True(t, ok, "job %d is sealed, in a tag: %q", job.ID, job.Tags)
	require.NotContains(t, string(job.Metadata), seal.MetadataKey+`"`, "the seal is not in metadata")
	f := strings.SplitN(text, ".", 6)
	require.Len(t, f, 6, text)
	require.Contains(t, []string{"3", "3e"}, f[0])
	return map[string]any{"k": f[1], "r": f[2], "d": f[3], "e": f[0] == "3e", "m": f[4], "q": f[5]}
}

// TestVerifier_Check: the database claims a sealed job's run id when the
// job is written, and marks in the row a copy written back (under another
// id, or under the deleted original's id, or by an UPDATE of another row),
// whichever of them starts first; the worker reads the mark, and no query.
func TestVerifier_Check(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	_, err := seal.Arm(t.Context(), pool)
	require.NoError(t, err)
	keys := mustKeys(t, newKey(t))
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(keys)}})
	require.NoError(t, err)
	v, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys})
	require.NoError(t, err)
	ctx := t.Context()
	queue := fmt.Sprintf("seal_check_%d", queueSeq.Add(1))
	get := func(id int64) *rivertype.JobRow {
		t.Helper()
		job, err := ins.JobGet(ctx, id)
		require.NoError(t, err)
		return job
	}
	requireReason := func(want seal.Reason, refusal *seal.RefusedError) {
		t.Helper()
		require.NotNil(t, refusal)
		require.Equal(t, want, refusal.Reason, refusal.Detail)
	}

	res, err := ins.Insert(ctx, effectArgs{N: 7}, &river.InsertOpts{Queue: queue})
	require.NoError(t, err)
	origID := res.Job.ID
	var stored string
	require.NoError(t, pool.QueryRow(ctx, `SELECT metadata::text FROM river_job WHERE id = $1`, origID).Scan(&stored))
	require.NotContains(t, stored, "ferry_seal_claim", "a job written in time under its own claim has no mark")

	copyID := copyJob(t, pool, origID)
	// The copy is refused whichever starts first; the original runs, and
	// its retries do.
	requireReason(seal.ReasonReplayed, v.Check(get(copyID)))
	require.Nil(t, v.Check(get(origID)))
	require.Nil(t, v.Check(get(origID)))

	t.Run("MarkRemovedByHand", func(t *testing.T) {
		_, err := pool.Exec(ctx, `UPDATE river_job SET metadata = metadata - 'ferry_seal_claim' WHERE id = $1`, copyID)
		require.NoError(t, err)
		requireReason(seal.ReasonReplayed, v.Check(get(copyID)))
	})

	t.Run("MarkForgedOnAJobOfItsOwn", func(t *testing.T) {
		// A mark written by hand into a good job is replaced by the truth.
		res, err := ins.Insert(ctx, effectArgs{N: 8}, &river.InsertOpts{Queue: queue})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE river_job SET metadata = metadata || '{"ferry_seal_claim": {"job": 1, "at": 0, "gone": true}}' WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
		require.Nil(t, v.Check(get(res.Job.ID)))
	})

	t.Run("MetadataMergedByRiver", func(t *testing.T) {
		// River merges metadata into a job's row (output, rescue counts):
		// the row's claim is its own still, and it gets no mark.
		res, err := ins.Insert(ctx, effectArgs{N: 12}, &river.InsertOpts{Queue: queue})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `UPDATE river_job SET metadata = metadata || '{"river:rescue_count": 1}' WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
		var stored string
		require.NoError(t, pool.QueryRow(ctx, `SELECT metadata::text FROM river_job WHERE id = $1`, res.Job.ID).Scan(&stored))
		require.NotContains(t, stored, "ferry_seal_claim")
		require.Contains(t, stored, "river:rescue_count")
		require.Nil(t, v.Check(get(res.Job.ID)))
	})

	t.Run("SealCopiedOntoAnotherRow", func(t *testing.T) {
		other, err := ins.Insert(ctx, effectArgs{N: 9}, &river.InsertOpts{Queue: queue})
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `
			UPDATE river_job j SET args = o.args, kind = o.kind, tags = o.tags
			FROM river_job o WHERE o.id = $1 AND j.id = $2`, origID, other.Job.ID)
		require.NoError(t, err)
		requireReason(seal.ReasonReplayed, v.Check(get(other.Job.ID)))
	})

	t.Run("CopyWithAnotherSealTag", func(t *testing.T) {
		// A copy given a second seal tag: the worker and the database take
		// the same one, the last. Before the original's, the copy is a
		// replay; after it, a seal that does not match.
		fresh, err := ins.Insert(ctx, effectArgs{N: 13}, &river.InsertOpts{Queue: queue})
		require.NoError(t, err)
		freshTag := sealOf(t, get(fresh.Job.ID))
		forged := fmt.Sprintf("3.%s.%s.%s.%s.%s", freshTag["k"], "aaaaaaaaaaaaaaaa", freshTag["d"], freshTag["m"], queue)
		for _, tc := range []struct {
			name string
			sql  string
			want seal.Reason
		}{
			{"Before", `array_prepend($2::varchar, tags)`, seal.ReasonReplayed},
			{"After", `array_append(tags, $2::varchar)`, seal.ReasonInvalid},
		} {
			var id int64
			require.NoError(t, pool.QueryRow(ctx, `
				INSERT INTO river_job (args, kind, max_attempts, metadata, queue, priority, state, tags)
				SELECT args, kind, max_attempts, metadata, queue, priority, 'available', `+tc.sql+`
				FROM river_job WHERE id = $1
				RETURNING id`, origID, forged).Scan(&id))
			requireReason(tc.want, v.Check(get(id)))
		}
	})

	t.Run("CopyUnderTheDeletedOriginalsID", func(t *testing.T) {
		res, err := ins.Insert(ctx, effectArgs{N: 10}, &river.InsertOpts{Queue: queue})
		require.NoError(t, err)
		keep := get(res.Job.ID)
		_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `
			INSERT INTO river_job (id, args, kind, max_attempts, metadata, queue, priority, state, tags)
			VALUES ($1, $2, $3, 25, $4, $5, 1, 'available', $6)`, keep.ID, keep.EncodedArgs, keep.Kind, keep.Metadata, keep.Queue, keep.Tags)
		require.NoError(t, err)
		requireReason(seal.ReasonReplayed, v.Check(get(keep.ID)))
	})

	t.Run("AfterTheWindow", func(t *testing.T) {
		late, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys, Now: func() time.Time { return time.Now().Add(seal.DefaultReplayWindow + time.Hour) }})
		require.NoError(t, err)
		orig := get(origID)
		requireReason(seal.ReasonStale, late.Check(orig))
		orig.Attempt = 2 // a retry of a job that started in time
		require.Nil(t, late.Check(orig))
		cp := get(copyID)
		cp.Attempt = 2
		requireReason(seal.ReasonReplayed, late.Check(cp))
	})

	t.Run("CopyAfterTheClaimExpired", func(t *testing.T) {
		// A job due two hours ago, within a one-hour window: its claim is
		// deleted, and a copy written back claims anew, too late.
		res, err := ins.Insert(ctx, effectArgs{N: 11}, &river.InsertOpts{Queue: queue, ScheduledAt: time.Now().Add(-2 * time.Hour)})
		require.NoError(t, err)
		hour, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys, ReplayWindow: 3 * time.Hour})
		require.NoError(t, err)
		orig := get(res.Job.ID)
		orig.Attempt = 1
		require.Nil(t, hour.Check(orig), "written within its window")
		_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
		n, err := seal.DeleteExpiredClaims(ctx, pool, 0)
		require.NoError(t, err)
		require.Positive(t, n)
		var left int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM ferry_seal_run WHERE run_id = $1`, sealOf(t, orig)["r"]).Scan(&left))
		require.Zero(t, left, "the claim was deleted")
		_, err = pool.Exec(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, metadata, queue, priority, state, attempt, tags)
			VALUES ($1, $2, 25, $3, $4, 1, 'available', 3, $5)`, orig.EncodedArgs, orig.Kind, orig.Metadata, orig.Queue, orig.Tags)
		require.NoError(t, err)
		var cp int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT max(id) FROM river_job WHERE queue = $1`, queue).Scan(&cp))
		short, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys, ReplayWindow: time.Hour})
		require.NoError(t, err)
		requireReason(seal.ReasonStale, short.Check(get(cp)))
	})
}

// TestArm: sealed jobs written while no worker with keys had put the claim
// trigger on river_job are claimed when one does, oldest first, and a copy
// written meanwhile is marked; a database never armed has no such trigger.
func TestArm(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := t.Context()
	armed := func() bool {
		t.Helper()
		var ok bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT ferry_seal_armed()`).Scan(&ok))
		return ok
	}
	require.False(t, armed(), "a fresh database claims nothing on insert")
	keys := mustKeys(t, newKey(t))
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(keys)}})
	require.NoError(t, err)
	res, err := ins.Insert(ctx, effectArgs{N: 1}, &river.InsertOpts{Queue: "seal_arm"})
	require.NoError(t, err)
	copyID := copyJob(t, pool, res.Job.ID)

	did, err := seal.Arm(ctx, pool)
	require.NoError(t, err)
	require.True(t, did)
	require.True(t, armed())
	did, err = seal.Arm(ctx, pool)
	require.NoError(t, err)
	require.False(t, did, "armed once")

	v, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys})
	require.NoError(t, err)
	orig, err := ins.JobGet(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Nil(t, v.Check(orig))
	cp, err := ins.JobGet(ctx, copyID)
	require.NoError(t, err)
	refusal := v.Check(cp)
	require.NotNil(t, refusal)
	require.Equal(t, seal.ReasonReplayed, refusal.Reason)

	// From now on the insert claims, one statement for all its rows: a COPY
	// of 100 sealed jobs claims each for itself and marks none, and a
	// statement writing two copies at once marks both.
	params := make([]river.InsertManyParams, 100)
	for i := range params {
		params[i] = river.InsertManyParams{Args: effectArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: "seal_arm_bulk"}}
	}
	_, err = ins.InsertManyFast(ctx, params)
	require.NoError(t, err)
	var claimed, marked int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE s.job_id = j.id), count(*) FILTER (WHERE j.metadata ? 'ferry_seal_claim')
		FROM river_job j JOIN ferry_seal_run s ON s.run_id = ferry_seal_run_id(j.tags, j.metadata)
		WHERE j.queue = 'seal_arm_bulk'`).Scan(&claimed, &marked))
	require.Equal(t, 100, claimed)
	require.Zero(t, marked)

	rows, err := pool.Query(ctx, `
		INSERT INTO river_job (args, kind, max_attempts, metadata, queue, priority, state, tags)
		SELECT args, kind, max_attempts, metadata, queue, priority, 'available', tags
		FROM river_job, generate_series(1, 2) WHERE id = $1
		RETURNING id`, res.Job.ID)
	require.NoError(t, err)
	copies, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, copies, 2)
	for _, id := range copies {
		job, err := ins.JobGet(ctx, id)
		require.NoError(t, err)
		refusal := v.Check(job)
		require.NotNil(t, refusal, "copy %d", id)
		require.Equal(t, seal.ReasonReplayed, refusal.Reason)
	}
}

// copyJob writes a copy of job id back to river_job under a new id with
// plain SQL, as an attacker would, without the original's mark, and
// returns the copy's id.
func copyJob(t *testing.T, pool *pgxpool.Pool, id int64) int64 {
	t.Helper()
	var copyID int64
	require.NoError(t, pool.QueryRow(t.Context(), `
		INSERT INTO river_job (args, kind, max_attempts, metadata, queue, priority, state, tags)
		SELECT args, kind, max_attempts, metadata - 'ferry_seal_claim', queue, priority, 'available', tags
		FROM river_job WHERE id = $1
		RETURNING id`, id).Scan(&copyID))
	return copyID
}
