package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/seal"
)

// copyRow is what TestCopy compares of a job's row: every column River's
// COPY fills.
type copyRow struct {
	Args, Kind, Metadata, Queue, State string
	MaxAttempts, Priority              int
	Tags                               []string
	UniqueKey                          []byte
	UniqueStates                       *string
	CreatedAt, ScheduledAt             time.Time
}

// readCopyRows reads the rows of the jobs with ids, in that order.
func readCopyRows(t *testing.T, db jobs.DBTX, ids []int64) []copyRow {
	t.Helper()
	rows, err := db.Query(t.Context(), `
		SELECT args::text, kind, metadata::text, queue, state::text, max_attempts, priority, tags,
		       unique_key, unique_states::text, created_at, scheduled_at
		FROM river_job JOIN unnest($1::bigint[]) WITH ORDINALITY AS w(id, n) USING (id)
		ORDER BY w.n`, ids)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (copyRow, error) {
		var c copyRow
		err := r.Scan(&c.Args, &c.Kind, &c.Metadata, &c.Queue, &c.State, &c.MaxAttempts, &c.Priority, &c.Tags,
			&c.UniqueKey, &c.UniqueStates, &c.CreatedAt, &c.ScheduledAt)
		return c, err
	})
	require.NoError(t, err)
	require.Len(t, out, len(ids))
	return out
}

// copyKind has its own insert options, as a kind's args may.
type copyKind struct {
	N int `json:"n"`
}

func (copyKind) Kind() string { return "test.copy_kind" }
func (copyKind) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: "copy_kind_q", Priority: 3, MaxAttempts: 7, Tags: []string{"from_kind"}}
}

// TestCopy: EncodeCopy and CopyTx write the rows River's InsertManyFastTx
// writes for the same jobs, column by column: the options of the call, of
// the args and River's defaults; args and metadata that need escaping in
// COPY's text format; scheduled and pending jobs; WithUniqueKey's key (the
// insert middleware ran).
func TestCopy(t *testing.T) {
	t.Parallel()
	pool, ins := copyInserter(t)
	queue := fmt.Sprintf("copy_%d", queueSeq.Add(1))
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, time.FixedZone("x", 3600))
	odd := jobs.RawArgs{KindName: "test.copy_raw", JSON: json.RawMessage(`{"s":"tab\there\\back\nnew \"q\" {a,b} é","n":[1,2.5]}`)}
	params := []river.InsertManyParams{
		{Args: jobs.NoopArgs{}},
		{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: queue}},
		{Args: odd, InsertOpts: &river.InsertOpts{Queue: queue, Priority: 4, MaxAttempts: 3, Tags: []string{"a_b", "c-d-e"},
			Metadata: json.RawMessage(`{"m":"x\\ty"}`)}},
		{Args: odd, InsertOpts: &river.InsertOpts{Queue: queue, ScheduledAt: at}},
		{Args: odd, InsertOpts: &river.InsertOpts{Queue: queue, Pending: true}},
		{Args: copyKind{N: 1}},
		{Args: copyKind{N: 2}, InsertOpts: &river.InsertOpts{Queue: queue, Tags: []string{}}},
		{Args: odd, InsertOpts: jobs.WithUniqueKey(&river.InsertOpts{Queue: queue}, fmt.Sprint("k", queueSeq.Add(1)))},
	}

	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()

	// River's own rows first.
	var before int64
	require.NoError(t, tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&before))
	n, err := ins.Client().InsertManyFastTx(ctx, tx, params)
	require.NoError(t, err)
	require.Equal(t, len(params), n)
	riverIDs := idsAfter(t, tx, before, len(params))
	// River stamps created_at (and an unscheduled job's scheduled_at) with
	// its own clock: take its time as ours.
	var now time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT created_at FROM river_job WHERE id = $1`, riverIDs[0]).Scan(&now))

	want := readCopyRows(t, tx, riverIDs)

	// The unique job cannot be inserted twice: COPY it once River's is gone.
	_, err = tx.Exec(ctx, `DELETE FROM river_job WHERE id = $1`, riverIDs[len(riverIDs)-1])
	require.NoError(t, err)

	rows, err := ins.EncodeCopy(ctx, now, params)
	require.NoError(t, err)
	require.Len(t, rows, len(params))
	batch := batchOf(rows)
	require.Equal(t, len(params), batch.Len())
	require.NoError(t, tx.QueryRow(ctx, `SELECT max(id) FROM river_job`).Scan(&before))
	n, err = ins.CopyTx(ctx, tx, batch)
	require.NoError(t, err)
	require.Equal(t, len(params), n)
	copyIDs := idsAfter(t, tx, before, len(params))

	got := readCopyRows(t, tx, copyIDs)
	for i := range want {
		require.Equal(t, want[i], got[i], "job %d", i)
	}

	// Spot checks that the comparison compared something.
	require.Equal(t, "default", got[0].Queue)
	require.Equal(t, 25, got[0].MaxAttempts)
	require.Equal(t, "copy_kind_q", got[5].Queue)
	require.Equal(t, []string{"from_kind"}, got[5].Tags)
	require.Empty(t, got[6].Tags)
	require.Equal(t, "scheduled", got[3].State)
	require.True(t, got[3].ScheduledAt.Equal(at.Truncate(time.Microsecond)))
	require.Equal(t, "pending", got[4].State)
	var s struct{ S string }
	require.NoError(t, json.Unmarshal([]byte(got[2].Args), &s))
	require.Equal(t, "tab\there\\back\nnew \"q\" {a,b} é", s.S)
	require.JSONEq(t, `{"m":"x\\ty"}`, got[2].Metadata)
	require.NotEmpty(t, got[7].UniqueKey)
	require.NotNil(t, got[7].UniqueStates)
}

// copyInserter returns the package's pool and an Inserter over it that
// seals nothing.
func copyInserter(t *testing.T) (*pgxpool.Pool, *jobs.Inserter) {
	t.Helper()
	pool := pgtest.Pool(t)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	return pool, ins
}

// batchOf returns a batch of rows.
func batchOf(rows []jobs.CopyRow) *jobs.CopyBatch {
	b := &jobs.CopyBatch{}
	for _, r := range rows {
		b.Add(r)
	}
	return b
}

// idsAfter returns the ids of the n jobs after id that tx inserted (other
// tests insert at the same time), in order, and fails unless there are
// exactly n.
func idsAfter(t *testing.T, tx pgx.Tx, id int64, n int) []int64 {
	t.Helper()
	rows, err := tx.Query(t.Context(), `
		SELECT id FROM river_job
		WHERE id > $1 AND xmin::text = (txid_current() % 4294967296)::text
		ORDER BY id`, id)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n)
	return ids
}

// TestCopy_Refused: what River's insert refuses, EncodeCopy refuses, and a
// duplicate unique key or a full queue refuses the whole COPY.
func TestCopy_Refused(t *testing.T) {
	t.Parallel()
	pool, ins := copyInserter(t)
	now := time.Now()
	for name, opts := range map[string]*river.InsertOpts{
		"Queue":      {Queue: "No Such Queue"},
		"Priority":   {Priority: 5},
		"Tag":        {Tags: []string{"a b"}},
		"UniqueOpts": {UniqueOpts: river.UniqueOpts{ByArgs: true}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ins.EncodeCopy(t.Context(), now, []river.InsertManyParams{{Args: jobs.NoopArgs{}, InsertOpts: opts}})
			require.Error(t, err)
		})
	}

	t.Run("DuplicateKey", func(t *testing.T) {
		opts := jobs.WithUniqueKey(&river.InsertOpts{Queue: insertQueue}, fmt.Sprint("dup", queueSeq.Add(1)))
		rows, err := ins.EncodeCopy(t.Context(), now, []river.InsertManyParams{{Args: jobs.NoopArgs{}, InsertOpts: opts}, {Args: jobs.NoopArgs{}, InsertOpts: opts}})
		require.NoError(t, err)
		err = pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
			_, err := ins.CopyTx(t.Context(), tx, batchOf(rows))
			return err
		})
		require.ErrorContains(t, err, "river_job_unique_idx")
	})

	t.Run("QueueFull", func(t *testing.T) {
		b := setupBound(t, 2)
		params := make([]river.InsertManyParams, 3)
		for i := range params {
			params[i] = river.InsertManyParams{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: b.queue}}
		}
		rows, err := b.ins.EncodeCopy(t.Context(), now, params)
		require.NoError(t, err)
		err = pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			_, err := b.ins.CopyTx(t.Context(), tx, batchOf(rows))
			return err
		})
		require.ErrorIs(t, err, jobs.ErrQueueFull)
		var qf *jobs.QueueFullError
		require.ErrorAs(t, err, &qf)
		require.Equal(t, b.queue, qf.Queue)
		require.Zero(t, b.count(t))
	})
}

// TestCopyFromTx: batches from next go in as one COPY, in order, with
// River's insert notification for each queue given an available job (and
// none for a queue of scheduled jobs only), sent at commit; an error of
// next ends the COPY with that error and nothing inserted.
func TestCopyFromTx(t *testing.T) {
	t.Parallel()
	pool, ins := copyInserter(t)
	ctx := t.Context()
	ready := fmt.Sprintf("copy_ready_%d", queueSeq.Add(1))
	later := fmt.Sprintf("copy_later_%d", queueSeq.Add(1))

	var topic string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_schema() || '.river_insert'`).Scan(&topic))
	listener, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{topic}.Sanitize())
	require.NoError(t, err)
	defer func() { _, _ = listener.Exec(context.WithoutCancel(ctx), "UNLISTEN *") }()

	now := time.Now()
	var batches []*jobs.CopyBatch
	for i := range 3 {
		rows, err := ins.EncodeCopy(ctx, now, []river.InsertManyParams{
			{Args: jobs.RawArgs{KindName: "test.copy_from", JSON: json.RawMessage(fmt.Sprintf(`{"n":%d}`, 2*i))}, InsertOpts: &river.InsertOpts{Queue: ready}},
			{Args: jobs.RawArgs{KindName: "test.copy_from", JSON: json.RawMessage(fmt.Sprintf(`{"n":%d}`, 2*i+1))}, InsertOpts: &river.InsertOpts{Queue: later, ScheduledAt: now.Add(time.Hour)}},
		})
		require.NoError(t, err)
		batches = append(batches, batchOf(rows))
	}
	feed := func(bs []*jobs.CopyBatch, end error) func() (*jobs.CopyBatch, error) {
		return func() (*jobs.CopyBatch, error) {
			if len(bs) == 0 {
				return nil, end
			}
			b := bs[0]
			bs = bs[1:]
			return b, nil
		}
	}

	boom := fmt.Errorf("the input broke")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ins.CopyFromTx(ctx, tx, feed(batches[:2], boom))
		return err
	})
	require.ErrorIs(t, err, boom)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue IN ($1, $2)`, ready, later).Scan(&n))
	require.Zero(t, n)

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		n, err := ins.CopyFromTx(ctx, tx, feed(batches, nil))
		require.Equal(t, 6, n)
		return err
	}))
	rows, err := pool.Query(ctx, `SELECT (args->>'n')::int FROM river_job WHERE queue IN ($1, $2) ORDER BY id`, ready, later)
	require.NoError(t, err)
	order, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 3, 4, 5}, order)

	// Notifications of other tests' inserts may come too: wait for ours,
	// and fail on one for the queue of scheduled jobs.
	wait, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		note, err := listener.Conn().WaitForNotification(wait)
		require.NoError(t, err, "no insert notification for %s", ready)
		var payload struct{ Queue string }
		require.NoError(t, json.Unmarshal([]byte(note.Payload), &payload))
		require.NotEqual(t, later, payload.Queue)
		if payload.Queue == ready {
			break
		}
	}
}

// TestCopy_Seals: with seal keys, the COPY path seals every job as the
// other insert paths do (TestInserter_Seals), each with its own seal when
// jobs share their options.
func TestCopy_Seals(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	keys, err := seal.ParseKeys(sealKey(t))
	require.NoError(t, err)
	v, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys})
	require.NoError(t, err)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(keys))
	require.NoError(t, err)
	queue := fmt.Sprintf("seal_copy_%d", queueSeq.Add(1))
	// Two jobs share their options, whose tags have room to grow: each
	// gets its own seal all the same.
	shared := &river.InsertOpts{Queue: queue, Tags: make([]string, 0, 4)}
	rows, err := ins.EncodeCopy(t.Context(), time.Now(), []river.InsertManyParams{
		{Args: jobs.NoopArgs{}, InsertOpts: shared},
		{Args: jobs.NoopArgs{}, InsertOpts: shared},
		{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: queue, ScheduledAt: time.Now().Add(time.Hour)}},
	})
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(t.Context(), pool, func(tx pgx.Tx) error {
		_, err := ins.CopyTx(t.Context(), tx, batchOf(rows))
		return err
	}))
	r, err := pool.Query(t.Context(), `SELECT id FROM river_job WHERE queue = $1`, queue)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(r, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 3)
	for _, id := range ids {
		job, err := ins.Client().JobGet(t.Context(), id)
		require.NoError(t, err)
		require.Nil(t, v.Check(job), "job %d", id)
	}
}
