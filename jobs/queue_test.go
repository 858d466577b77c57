package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

type boundBundle struct {
	pool  *pgxpool.Pool
	ins   *jobs.Inserter
	queue string
}

var boundSeq atomic.Int64

// setupBound returns an inserter and a fresh queue bounded to maxLength, on
// the package's database or the pool given.
func setupBound(t *testing.T, maxLength int64, pools ...*pgxpool.Pool) *boundBundle {
	t.Helper()
	pool := pgtest.Pool(t)
	if len(pools) > 0 {
		pool = pools[0]
	}
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	queue := fmt.Sprintf("bounded_%d", boundSeq.Add(1))
	_, err = jobs.SetQueueBounds(t.Context(), pool, []jobs.QueueBound{{Name: queue, MaxLength: maxLength}})
	require.NoError(t, err)
	return &boundBundle{pool: pool, ins: ins, queue: queue}
}

// insert inserts n no-op jobs into the bundle's queue in one transaction
// through InsertManyTx (InsertTx for one).
func (b *boundBundle) insert(t *testing.T, n int) error {
	t.Helper()
	return pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		if n == 1 {
			_, err := b.ins.InsertTx(t.Context(), tx, jobs.NoopArgs{}, &river.InsertOpts{Queue: b.queue})
			return err
		}
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: b.queue}}
		}
		_, err := b.ins.InsertManyTx(t.Context(), tx, params)
		return err
	})
}

func (b *boundBundle) count(t *testing.T) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE queue = $1`, b.queue).Scan(&n))
	return n
}

func requireQueueFull(t *testing.T, err error, queue string, maxLength, length int64) {
	t.Helper()
	require.ErrorIs(t, err, jobs.ErrQueueFull)
	var qf *jobs.QueueFullError
	require.ErrorAs(t, err, &qf)
	require.Equal(t, queue, qf.Queue)
	require.Equal(t, maxLength, qf.MaxLength)
	require.Equal(t, length, qf.Length)
	require.Contains(t, err.Error(), "queue full")
}

func TestQueueBound_ConcurrentInserters(t *testing.T) {
	t.Parallel()

	const bound, inserters, each = 40, 16, 6 // 96 attempts for 40 places
	b := setupBound(t, bound)

	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		inserted atomic.Int64
		full     atomic.Int64
		other    = make(chan error, inserters*each)
	)
	for range inserters {
		wg.Go(func() {
			<-start
			for range each {
				// Each insert in a transaction of its own that commits
				// after the trigger has admitted the job, so that the
				// inserters contend on the queue's row.
				err := b.insert(t, 1)
				switch {
				case err == nil:
					inserted.Add(1)
				case errors.Is(err, jobs.ErrQueueFull):
					full.Add(1)
				default:
					other <- err
				}
			}
		})
	}
	close(start)
	wg.Wait()
	close(other)
	for err := range other {
		require.NoError(t, err)
	}
	// No job leaves the queue during the test, so a refusal happens only
	// when the queue holds its bound: exactly bound jobs, never more.
	require.EqualValues(t, bound, inserted.Load())
	require.EqualValues(t, inserters*each-bound, full.Load())
	require.EqualValues(t, bound, b.count(t))
}

func TestQueueBound_Inserter(t *testing.T) {
	t.Parallel()

	t.Run("InsertTxAtAndOverTheBound", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 3)
		for range 3 {
			require.NoError(t, b.insert(t, 1))
		}
		requireQueueFull(t, b.insert(t, 1), b.queue, 3, 3)
		require.EqualValues(t, 3, b.count(t))
	})

	t.Run("InsertManyTxRefusedWhole", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 5)
		require.NoError(t, b.insert(t, 2))
		requireQueueFull(t, b.insert(t, 4), b.queue, 5, 2)
		require.EqualValues(t, 2, b.count(t), "none of the four inserted")
		require.NoError(t, b.insert(t, 3), "exactly up to the bound fits")
		require.EqualValues(t, 5, b.count(t))
	})

	t.Run("OtherQueuesUnaffected", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 1)
		require.NoError(t, b.insert(t, 1))
		require.ErrorIs(t, b.insert(t, 1), jobs.ErrQueueFull)
		other := &boundBundle{pool: b.pool, ins: b.ins, queue: b.queue + "_unbounded"}
		require.NoError(t, other.insert(t, 10))
	})

	t.Run("ZeroBoundRefusesEverything", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 1)
		_, err := jobs.SetQueueBounds(t.Context(), b.pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 0}})
		require.NoError(t, err)
		require.NoError(t, b.insert(t, 2), "0 is unbounded")
	})
}

func TestQueueBound_PlainSQLRefused(t *testing.T) {
	t.Parallel()
	b := setupBound(t, 2)
	insert := func(n int) error {
		_, err := b.pool.Exec(t.Context(), `
			INSERT INTO river_job (args, kind, max_attempts, queue, state)
			SELECT '{}', 'ferry.noop', 25, $1, 'available' FROM generate_series(1, $2)`, b.queue, n)
		return err
	}
	err := insert(3)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, jobs.ErrCodeQueueFull, pgErr.Code)
	requireQueueFull(t, jobs.AsQueueFull(err), b.queue, 2, 0)
	require.EqualValues(t, 0, b.count(t))
	require.NoError(t, insert(2))
	require.ErrorIs(t, jobs.AsQueueFull(insert(1)), jobs.ErrQueueFull)
	// Finalized jobs do not count.
	_, err = b.pool.Exec(t.Context(), `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, finalized_at)
		VALUES ('{}', 'ferry.noop', 25, $1, 'completed', now())`, b.queue)
	require.NoError(t, err)
}

func TestQueueBound_Release(t *testing.T) {
	t.Parallel()

	t.Run("CompletionFreesRoom", func(t *testing.T) {
		t.Parallel()
		workers := river.NewWorkers()
		river.AddWorker(workers, &jobs.NoopWorker{})
		c := startClient(t, pgtest.Pool(t), workers)
		b := setupBound(t, 2)
		b.queue = c.queue
		_, err := jobs.SetQueueBounds(t.Context(), b.pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 2}})
		require.NoError(t, err)

		// Filling the queue, letting River's worker complete both jobs,
		// and filling it again works only if the completions released
		// their places.
		for round := range 3 {
			require.NoError(t, b.insert(t, 2), "round %d", round)
			waitCompleted(t, c, 2)
		}
		require.NoError(t, b.insert(t, 2))
		require.ErrorIs(t, b.insert(t, 1), jobs.ErrQueueFull)
	})

	t.Run("DeleteFreesRoom", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 2)
		require.NoError(t, b.insert(t, 2))
		require.ErrorIs(t, b.insert(t, 1), jobs.ErrQueueFull)
		_, err := b.pool.Exec(t.Context(), `DELETE FROM river_job WHERE id = (SELECT min(id) FROM river_job WHERE queue = $1)`, b.queue)
		require.NoError(t, err)
		require.NoError(t, b.insert(t, 1))
	})

	t.Run("RetryOfFinalizedJobRefused", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 1)
		require.NoError(t, b.insert(t, 1))
		var id int64
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT id FROM river_job WHERE queue = $1`, b.queue).Scan(&id))
		// River's JobCancel finalizes a job not running at once.
		_, err := b.ins.Client().JobCancel(t.Context(), id)
		require.NoError(t, err)
		require.NoError(t, b.insert(t, 1), "the cancelled job freed its place")
		_, err = b.ins.Client().JobRetry(t.Context(), id)
		require.ErrorIs(t, jobs.AsQueueFull(err), jobs.ErrQueueFull)
		var state string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
		require.Equal(t, "cancelled", state)
	})

	// An insert whose conflict moves the job it meets (a user's SQL; River's
	// own conflicts set only kind) is counted as an UPDATE is.
	t.Run("ConflictMovesJob", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 1)
		other := setupBound(t, 5)
		upsert := func(queue string) error {
			_, err := b.pool.Exec(t.Context(), `
				INSERT INTO river_job (args, kind, max_attempts, queue, state, unique_key, unique_states)
				VALUES ('{}', 'ferry.noop', 25, $1, 'available', $2::bytea, B'11111111')
				ON CONFLICT (unique_key) WHERE unique_key IS NOT NULL AND unique_states IS NOT NULL
					AND river_job_state_in_bitmask(unique_states, state)
				DO UPDATE SET queue = excluded.queue`, queue, []byte(b.queue))
			return jobs.AsQueueFull(err)
		}
		require.NoError(t, upsert(b.queue))
		require.ErrorIs(t, b.insert(t, 1), jobs.ErrQueueFull)
		require.NoError(t, upsert(other.queue), "the conflict moves the job to the other queue")
		require.EqualValues(t, 0, b.count(t))
		require.NoError(t, b.insert(t, 1), "the moved job freed its place")
		require.ErrorIs(t, upsert(b.queue), jobs.ErrQueueFull, "moving it back takes a place the queue no longer has")
	})

	t.Run("MoveBetweenQueues", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 1)
		other := setupBound(t, 5)
		require.NoError(t, b.insert(t, 1))
		require.NoError(t, other.insert(t, 2))
		_, err := b.pool.Exec(t.Context(), `UPDATE river_job SET queue = $1 WHERE queue = $2`, b.queue, other.queue)
		require.ErrorIs(t, jobs.AsQueueFull(err), jobs.ErrQueueFull)
		_, err = b.pool.Exec(t.Context(), `UPDATE river_job SET queue = $1 WHERE queue = $2`, other.queue, b.queue)
		require.NoError(t, err)
		require.NoError(t, b.insert(t, 1), "the moved job freed its place")
	})
}

func TestQueueBound_InFlight(t *testing.T) {
	t.Parallel()

	t.Run("UncommittedInsertCounts", func(t *testing.T) {
		t.Parallel()
		// A database of its own: while tx is open, another test bounding a
		// queue waits for it in LOCK TABLE, and this test's second insert
		// would queue behind that lock, waiting for tx.
		b := setupBound(t, 1, pgtest.PoolFor(t, pgtest.NewDatabase(t, true)))
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context()))
		_, err = b.ins.InsertTx(t.Context(), tx, jobs.NoopArgs{}, &river.InsertOpts{Queue: b.queue})
		require.NoError(t, err)
		// Another transaction does not wait for tx: tx's job holds the
		// place until tx ends.
		requireQueueFull(t, b.insert(t, 1), b.queue, 1, 1)
		require.NoError(t, tx.Commit(t.Context()))
		require.EqualValues(t, 1, b.count(t))
	})

	t.Run("RolledBackInsertGivenBackByRecount", func(t *testing.T) {
		t.Parallel()
		// A database of its own: the recount's LOCK TABLE would wait for,
		// and hold back, the other tests' transactions.
		b := setupBound(t, 2, pgtest.PoolFor(t, pgtest.NewDatabase(t, true)))
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		_, err = b.ins.InsertTx(t.Context(), tx, jobs.NoopArgs{}, &river.InsertOpts{Queue: b.queue})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(t.Context()))
		require.NoError(t, b.insert(t, 1))
		// The rolled-back admission still counts: a refusal early, never
		// an overshoot …
		requireQueueFull(t, b.insert(t, 1), b.queue, 2, 2)
		// … until the recount gives it back.
		require.NoError(t, jobs.RecountQueues(t.Context(), b.pool, 10*time.Second))
		require.NoError(t, b.insert(t, 1))
		requireQueueFull(t, b.insert(t, 1), b.queue, 2, 2)
		require.EqualValues(t, 2, b.count(t))
	})
}

func TestSetQueueBounds(t *testing.T) {
	t.Parallel()

	t.Run("CountsTheJobsAlreadyThere", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 0)
		require.NoError(t, b.insert(t, 4))
		changes, err := jobs.SetQueueBounds(t.Context(), b.pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 5, Workers: 3}})
		require.NoError(t, err)
		require.Equal(t, []jobs.BoundChange{{Queue: b.queue, From: 0, To: 5}}, changes)
		require.NoError(t, b.insert(t, 1))
		requireQueueFull(t, b.insert(t, 1), b.queue, 5, 5)
	})

	t.Run("UnchangedBoundChangesNothing", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 5)
		changes, err := jobs.SetQueueBounds(t.Context(), b.pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 5}})
		require.NoError(t, err)
		require.Empty(t, changes)
	})

	t.Run("LoweredBoundKeepsTheCount", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 5)
		require.NoError(t, b.insert(t, 3))
		changes, err := jobs.SetQueueBounds(t.Context(), b.pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 2}})
		require.NoError(t, err)
		require.Equal(t, []jobs.BoundChange{{Queue: b.queue, From: 5, To: 2}}, changes)
		requireQueueFull(t, b.insert(t, 1), b.queue, 2, 3)
	})
}

// waitCompleted waits for n completion events of the bundle's client.
func waitCompleted(t *testing.T, c *clientBundle, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for got := 0; got < n; {
		select {
		case ev := <-c.events:
			if ev.Kind == river.EventKindJobCompleted {
				got++
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d jobs completed", got, n)
		}
	}
}

// TestQueueBound_RiverClient: a River client with ferry's middleware (as
// the server's is) returns ErrQueueFull from its own insert calls.
func TestQueueBound_RiverClient(t *testing.T) {
	t.Parallel()
	b := setupBound(t, 1)
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Middleware: []rivertype.Middleware{jobs.UniqueKeyMiddleware()}})
	require.NoError(t, err)
	_, err = client.Insert(t.Context(), jobs.NoopArgs{}, &river.InsertOpts{Queue: b.queue})
	require.NoError(t, err)
	_, err = client.Insert(t.Context(), jobs.NoopArgs{}, &river.InsertOpts{Queue: b.queue})
	requireQueueFull(t, err, b.queue, 1, 1)
	_, err = client.InsertMany(t.Context(), []river.InsertManyParams{{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: b.queue}}})
	require.ErrorIs(t, err, jobs.ErrQueueFull)
	_, err = client.InsertManyFast(t.Context(), []river.InsertManyParams{{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: b.queue}}})
	require.ErrorIs(t, err, jobs.ErrQueueFull)
	require.EqualValues(t, 1, b.count(t))
}

// TestQueueBound_StatementAcrossQueues: a statement that adds jobs to
// several queues at once takes the general path of the insert trigger; it
// is refused whole when one of its bounded queues would go over, and gives
// back what it admitted to the others.
func TestQueueBound_StatementAcrossQueues(t *testing.T) {
	t.Parallel()
	a := setupBound(t, 3)
	b := setupBound(t, 2, a.pool)
	free := a.queue + "_unbounded"
	insert := func(na, nb, nfree int) error {
		_, err := a.pool.Exec(t.Context(), `
			INSERT INTO river_job (args, kind, max_attempts, queue, state)
			SELECT '{}', 'ferry.noop', 25, q, 'available'
			FROM (SELECT $1::text FROM generate_series(1, $2)
			      UNION ALL SELECT $3 FROM generate_series(1, $4)
			      UNION ALL SELECT $5 FROM generate_series(1, $6)) AS s(q)`,
			a.queue, na, b.queue, nb, free, nfree)
		return jobs.AsQueueFull(err)
	}
	require.NoError(t, insert(2, 1, 5))
	requireQueueFull(t, insert(1, 2, 1), b.queue, 2, 1)
	require.EqualValues(t, 2, a.count(t), "nothing of the refused statement inserted")
	require.EqualValues(t, 1, b.count(t))
	// The refused statement's admission to a was refunded: a still has room
	// for exactly one more, b for one.
	require.NoError(t, insert(1, 1, 0))
	require.ErrorIs(t, insert(1, 0, 0), jobs.ErrQueueFull)
	require.ErrorIs(t, insert(0, 1, 0), jobs.ErrQueueFull)
}

// TestQueueBound_TriggersOnlyWithABound: a database where no queue has a
// bound has no counting trigger on river_job (inserts pay nothing for
// bounds); the first bound puts them there, counting the jobs already
// queued; the leader's recount drops them once no queue has a bound, and
// puts them back, recounting, if they went missing while one has.
func TestQueueBound_TriggersOnlyWithABound(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := t.Context()
	armed := func() bool {
		t.Helper()
		var n int
		require.NoError(t, pool.QueryRow(ctx, `
			SELECT count(*) FROM pg_trigger WHERE tgrelid = 'river_job'::regclass AND tgname LIKE 'ferry_queue_%'`).Scan(&n))
		require.Contains(t, []int{0, 3}, n, "all three counting triggers or none")
		return n == 3
	}
	require.False(t, armed(), "a fresh database has no bound and no counting trigger")

	b := setupBound(t, 0, pool)
	require.NoError(t, b.insert(t, 3))
	require.False(t, armed())
	require.NoError(t, jobs.RecountQueues(ctx, pool, time.Second))
	require.False(t, armed(), "the recount with no bound leaves them off")

	_, err := jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 4}})
	require.NoError(t, err)
	require.True(t, armed(), "bounding a queue puts the triggers on")
	require.NoError(t, b.insert(t, 1))
	requireQueueFull(t, b.insert(t, 1), b.queue, 4, 4)

	// Dropped by hand while a queue has a bound: inserts go uncounted
	// until the recount puts them back and counts again.
	_, err = pool.Exec(ctx, `DROP TRIGGER ferry_queue_insert ON river_job; DROP TRIGGER ferry_queue_update ON river_job; DROP TRIGGER ferry_queue_delete ON river_job`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `DELETE FROM river_job WHERE id IN (SELECT id FROM river_job WHERE queue = $1 LIMIT 2)`, b.queue)
	require.NoError(t, err)
	require.NoError(t, jobs.RecountQueues(ctx, pool, time.Second))
	require.True(t, armed(), "the recount put the triggers back")
	require.NoError(t, b.insert(t, 2), "the recount counted the two deleted jobs out")
	requireQueueFull(t, b.insert(t, 1), b.queue, 4, 4)

	// Unbounded: the triggers stay until the recount, which drops them.
	_, err = jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 0}})
	require.NoError(t, err)
	require.NoError(t, b.insert(t, 1))
	require.NoError(t, jobs.RecountQueues(ctx, pool, time.Second))
	require.False(t, armed(), "the recount dropped the triggers once no queue has a bound")
	require.NoError(t, b.insert(t, 5))

	// Bounded again: counted from the jobs there now (10).
	_, err = jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 11}})
	require.NoError(t, err)
	require.True(t, armed())
	require.NoError(t, b.insert(t, 1))
	requireQueueFull(t, b.insert(t, 1), b.queue, 11, 11)
}

// sessionBound is a bounded queue whose inserts all run on one connection,
// so that what the session caches (migration 018: the queue's refunded +
// released, in a setting named after the compile) carries from one insert
// to the next; in a database of its own, where no other test's bound
// compiles the INSERT trigger's function anew (renaming the setting).
func sessionBound(t *testing.T, maxLength int64) *boundBundle {
	t.Helper()
	url := pgtest.NewDatabase(t, true)
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return setupBound(t, maxLength, pgtest.PoolFor(t, url+sep+"pool_max_conns=1"))
}

// setBound sets the bundle's queue's bound, as a worker does at start.
func (b *boundBundle) setBound(t *testing.T, maxLength int64) {
	t.Helper()
	_, err := jobs.SetQueueBounds(t.Context(), b.pool, []jobs.QueueBound{{Name: b.queue, MaxLength: maxLength}})
	require.NoError(t, err)
}

// cachedGone is what the bundle's session caches for its queue, "" for
// nothing: the setting's name is in the INSERT trigger's function, as
// ferry_queue_compile wrote it.
func (b *boundBundle) cachedGone(t *testing.T) string {
	t.Helper()
	var name string
	require.NoError(t, b.pool.QueryRow(t.Context(), `
		SELECT substring(p.prosrc from 'ferry\.queue_gone_[0-9]+_' || q.admitted::oid || '\M')
		FROM pg_proc p, ferry_queue q
		WHERE p.proname = 'ferry_queue_count_insert' AND q.name = $1`, b.queue).Scan(&name))
	require.NotEmpty(t, name)
	var v *string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT current_setting($1, true)`, name).Scan(&v))
	if v == nil {
		return ""
	}
	return *v
}

// TestQueueBound_CachedGone: a session's cached count of the jobs gone
// from a queue is never used after the queue's counters restart, nor does
// it hide a lowered bound.
func TestQueueBound_CachedGone(t *testing.T) {
	t.Parallel()

	t.Run("CountersRestart", func(t *testing.T) {
		t.Parallel()
		b := sessionBound(t, 3)
		require.NoError(t, b.insert(t, 3))
		_, err := b.pool.Exec(t.Context(), `DELETE FROM river_job WHERE queue = $1`, b.queue)
		require.NoError(t, err)
		require.Empty(t, b.cachedGone(t))
		// Over the bound with nothing cached: the statement reads the three
		// deletions and caches them.
		require.NoError(t, b.insert(t, 1))
		require.Equal(t, "4", b.cachedGone(t), "one refund and three releases cached")

		// Unbound and bound again: the counters start from the one job
		// there, at zero gone. A session still counting three (four) gone
		// would let seven jobs in.
		b.setBound(t, 0)
		b.setBound(t, 3)
		require.NoError(t, b.insert(t, 2))
		requireQueueFull(t, b.insert(t, 1), b.queue, 3, 3)
		require.EqualValues(t, 3, b.count(t))
	})

	t.Run("LoweredBound", func(t *testing.T) {
		t.Parallel()
		b := sessionBound(t, 10)
		require.NoError(t, b.insert(t, 3))
		b.setBound(t, 3)
		requireQueueFull(t, b.insert(t, 1), b.queue, 3, 3)
	})

	t.Run("ReleasesSeenNearTheBound", func(t *testing.T) {
		t.Parallel()
		b := sessionBound(t, 2)
		for round := range 5 {
			require.NoError(t, b.insert(t, 2), "round %d", round)
			requireQueueFull(t, b.insert(t, 1), b.queue, 2, 2)
			_, err := b.pool.Exec(t.Context(), `DELETE FROM river_job WHERE queue = $1`, b.queue)
			require.NoError(t, err)
		}
	})
}

// TestQueueBound_Compile: the INSERT trigger's function is written anew
// from ferry_queue by each transaction that changes a bound, one after
// another, in READ COMMITTED only.
func TestQueueBound_Compile(t *testing.T) {
	t.Parallel()

	t.Run("ConcurrentChanges", func(t *testing.T) {
		t.Parallel()
		pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
		a, b := setupBound(t, 10, pool), setupBound(t, 10, pool)
		require.NoError(t, a.insert(t, 2))
		require.NoError(t, b.insert(t, 2))
		// The first transaction holds its commit after its compile (a
		// deferred trigger of this test's, after ferry's by name, waits
		// for an advisory lock the test holds); the second commits
		// meanwhile, and must compile after the first commits, with the
		// first's bound.
		const holdKey = 8110999
		_, err := pool.Exec(t.Context(), fmt.Sprintf(`
			CREATE FUNCTION test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN PERFORM pg_advisory_xact_lock(%d); RETURN NULL; END $$;
			CREATE CONSTRAINT TRIGGER zz_test_hold AFTER UPDATE ON ferry_queue
				DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
				WHEN (current_setting('ferry_test.hold', true) = 'on')
				EXECUTE FUNCTION test_hold()`, holdKey))
		require.NoError(t, err)
		holder, err := pool.Acquire(t.Context())
		require.NoError(t, err)
		defer holder.Release()
		_, err = holder.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, holdKey)
		require.NoError(t, err)
		defer func() { _, _ = holder.Exec(context.Background(), `SELECT pg_advisory_unlock_all()`) }()

		txs := make([]pgx.Tx, 2)
		pids := make([]uint32, 2)
		for i, q := range []string{a.queue, b.queue} {
			tx, err := pool.Begin(t.Context())
			require.NoError(t, err)
			t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
			if i == 0 { // the trigger's WHEN is read at the update
				_, err = tx.Exec(t.Context(), `SET LOCAL ferry_test.hold = 'on'`)
				require.NoError(t, err)
			}
			_, err = tx.Exec(t.Context(), `UPDATE ferry_queue SET max_length = 2 WHERE name = $1`, q)
			require.NoError(t, err)
			require.NoError(t, tx.QueryRow(t.Context(), `SELECT pg_backend_pid()`).Scan(&pids[i]))
			txs[i] = tx
		}
		waiting := func(pid uint32) func() bool {
			return func() bool {
				var w bool
				err := pool.QueryRow(t.Context(), `SELECT coalesce(bool_or(wait_event_type = 'Lock'), false) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&w)
				return err == nil && w
			}
		}
		errs := make([]chan error, 2)
		for i, tx := range txs {
			errs[i] = make(chan error, 1)
			go func() { errs[i] <- tx.Commit(t.Context()) }()
			require.Eventually(t, waiting(pids[i]), 30*time.Second, 5*time.Millisecond, "commit %d waits", i)
		}
		_, err = holder.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, holdKey)
		require.NoError(t, err)
		require.NoError(t, <-errs[0])
		require.NoError(t, <-errs[1])
		requireQueueFull(t, a.insert(t, 1), a.queue, 2, 2)
		requireQueueFull(t, b.insert(t, 1), b.queue, 2, 2)
	})

	t.Run("RepeatableReadRefused", func(t *testing.T) {
		t.Parallel()
		b := setupBound(t, 10)
		tx, err := b.pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = tx.Exec(t.Context(), `UPDATE ferry_queue SET max_length = 1 WHERE name = $1`, b.queue)
		require.NoError(t, err)
		err = tx.Commit(t.Context())
		require.ErrorContains(t, err, "READ COMMITTED")
		require.NoError(t, b.insert(t, 2), "the bound stayed at 10")
	})
}
