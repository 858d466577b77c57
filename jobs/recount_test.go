package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// writeOp runs fn in a transaction of its own with a lock timeout, so that
// a writer held back by a lock fails rather than waits.
func (b *boundBundle) writeOp(ctx context.Context, lockTimeout time.Duration, fn func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", lockTimeout.Milliseconds())); err != nil {
			return err
		}
		return fn(tx)
	})
}

// fetch runs River's own fetch (the driver's JobGetAvailable, what a
// producer runs) for one job of the queue, and complete River's
// completer's statement (JobSetStateIfRunningMany) for one running job.
// Each returns whether it found a job.
func (b *boundBundle) fetch(ctx context.Context, tx pgx.Tx) (bool, error) {
	res, err := riverpgxv5.New(nil).UnwrapExecutor(tx).JobGetAvailable(ctx, &riverdriver.JobGetAvailableParams{
		ClientID: "recount-test", MaxAttemptedBy: 100, MaxToLock: 1, Queue: b.queue,
	})
	if err != nil {
		return false, err
	}
	return len(res.Jobs) == 1, nil
}

func (b *boundBundle) complete(ctx context.Context, tx pgx.Tx) (bool, error) {
	var id int64
	err := tx.QueryRow(ctx, `SELECT id FROM river_job WHERE queue = $1 AND state = 'running'
		ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`, b.queue).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	now := time.Now()
	_, err = riverpgxv5.New(nil).UnwrapExecutor(tx).JobSetStateIfRunningMany(ctx, &riverdriver.JobSetStateIfRunningManyParams{
		ID: []int64{id}, Attempt: []*int{nil}, ErrData: [][]byte{nil}, FinalizedAt: []*time.Time{&now},
		MetadataDoMerge: []bool{false}, MetadataUpdates: [][]byte{nil}, Now: &now,
		ScheduledAt: []*time.Time{nil}, State: []rivertype.JobState{rivertype.JobStateCompleted},
	})
	return err == nil, err
}

// counterAndTruth returns, in one statement, the queue's length from its
// counters and the jobs of committed transactions in the counted states.
func (b *boundBundle) counterAndTruth(t *testing.T) (counter, truth int64) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(t.Context(), `
		SELECT (SELECT count(*) FROM river_job WHERE queue = $1 AND ferry_queue_counted(state)),
			ferry_queue_length(q) FROM ferry_queue q WHERE q.name = $1`, b.queue).Scan(&truth, &counter))
	return counter, truth
}

// rolledBack inserts n jobs into the queue in a transaction that rolls back:
// admissions that only the recount gives back.
func (b *boundBundle) rolledBack(ctx context.Context, n int) error {
	tx, err := b.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for range n {
		if _, err := b.ins.InsertTx(ctx, tx, jobs.NoopArgs{}, &river.InsertOpts{Queue: b.queue}); err != nil {
			return err
		}
	}
	return tx.Rollback(ctx)
}

// repeat calls fn on a goroutine of wg until stop is closed or fn fails,
// and then sends its error, named, to errs.
func repeat(wg *sync.WaitGroup, stop <-chan struct{}, errs chan<- error, name string, fn func() error) {
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := fn(); err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
		}
	})
}

// TestRecountQueues_WritersNotHeldBehindVacuum: a session holding SHARE
// UPDATE EXCLUSIVE on river_job, as a VACUUM (autovacuum's included) does
// for as long as it runs, is there across a recount. The recount gives
// back a rolled-back admission all the same, and the writers of river_job
// (insert, fetch, complete, each with a lock timeout, so a writer held
// back is a failure and not a hang) go on throughout: none waits on a lock.
func TestRecountQueues_WritersNotHeldBehindVacuum(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupBound(t, 10_000, pgtest.PoolFor(t, pgtest.NewDatabase(t, true)))
	// A backlog the workers below do not get through: no job inserted
	// during the recount is finalized before it counts (such a job's
	// admission is given back by a later recount; see the package doc).
	require.NoError(t, b.insert(t, 2000))
	require.NoError(t, b.rolledBack(ctx, 3))
	counter, truth := b.counterAndTruth(t)
	require.Equal(t, truth+3, counter, "the rolled-back admissions still count before the recount")

	// The vacuum: SHARE UPDATE EXCLUSIVE on river_job, held until the end.
	vacuum, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer vacuum.Rollback(context.WithoutCancel(ctx))
	_, err = vacuum.Exec(ctx, `LOCK TABLE river_job IN SHARE UPDATE EXCLUSIVE MODE`)
	require.NoError(t, err)

	const lockTimeout = 500 * time.Millisecond
	var (
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		ops    [3]atomic.Int64
		failed = make(chan error, 3)
	)
	writers := []func(tx pgx.Tx) (bool, error){
		func(tx pgx.Tx) (bool, error) {
			_, err := b.ins.InsertTx(ctx, tx, jobs.NoopArgs{}, &river.InsertOpts{Queue: b.queue})
			return err == nil, err
		},
		func(tx pgx.Tx) (bool, error) { return b.fetch(ctx, tx) },
		func(tx pgx.Tx) (bool, error) { return b.complete(ctx, tx) },
	}
	for i, w := range writers {
		repeat(&wg, stop, failed, fmt.Sprintf("writer %d", i), func() error {
			var did bool
			err := b.writeOp(ctx, lockTimeout, func(tx pgx.Tx) error {
				var err error
				did, err = w(tx)
				return err
			})
			if did {
				ops[i].Add(1)
			}
			return err
		})
	}
	// Every writer has written before the recount starts.
	for i := range ops {
		for ops[i].Load() == 0 {
			select {
			case err := <-failed:
				t.Fatalf("a writer failed before the recount: %v", err)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	before := [3]int64{ops[0].Load(), ops[1].Load(), ops[2].Load()}
	recountErr := jobs.RecountQueues(ctx, b.pool, 3*time.Second)
	// Every writer writes again after the recount returned.
	for i := range ops {
		for ops[i].Load() <= before[i] {
			select {
			case err := <-failed:
				t.Fatalf("a writer failed: %v (recount: %v)", err, recountErr)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	close(stop)
	wg.Wait()
	close(failed)
	for err := range failed {
		t.Errorf("a writer was held back by a lock: %v", err)
	}
	require.NoError(t, recountErr, "the recount across the vacuum")
	counter, truth = b.counterAndTruth(t)
	require.GreaterOrEqual(t, counter, truth, "the recount gave back a place that is taken")

	// With the writers stopped, and the vacuum still there, a recount
	// gives back what rolled back, exactly. (One that ran while they wrote
	// may leave a job's admission for a later recount; see the package
	// doc.)
	require.NoError(t, jobs.RecountQueues(ctx, b.pool, 3*time.Second))
	counter, truth = b.counterAndTruth(t)
	require.Equal(t, truth, counter, "the recount gave the rolled-back admissions back, and no more")
	require.NoError(t, vacuum.Rollback(ctx))
}

// TestRecountQueues_ExactUnderConcurrentWriters: recounts run one after
// another while inserts commit, inserts roll back, and jobs are fetched and
// completed. The counters are never below the committed jobs (no recount
// gives back a place that is taken: the bound is never overshot), and once
// the writers stop, one more recount leaves them equal to the jobs there:
// every rolled-back admission given back, no other.
func TestRecountQueues_ExactUnderConcurrentWriters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupBound(t, 1_000_000, pgtest.PoolFor(t, pgtest.NewDatabase(t, true)))

	var (
		stop     = make(chan struct{})
		wg       sync.WaitGroup
		errs     = make(chan error, 8)
		inserted atomic.Int64
		undone   atomic.Int64
		done     atomic.Int64
	)
	loop := func(name string, fn func() error) { repeat(&wg, stop, errs, name, fn) }
	for i := range 2 {
		loop(fmt.Sprintf("inserter %d", i), func() error {
			n := 1 + int(inserted.Load()%3)
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				params := make([]river.InsertManyParams, n)
				for j := range params {
					params[j] = river.InsertManyParams{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: b.queue}}
				}
				_, err := b.ins.InsertManyTx(ctx, tx, params)
				return err
			})
			inserted.Add(int64(n))
			return err
		})
	}
	loop("rollback", func() error {
		undone.Add(2)
		return b.rolledBack(ctx, 2)
	})
	loop("worker", func() error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := b.fetch(ctx, tx); err != nil {
				return err
			}
			ok, err := b.complete(ctx, tx)
			if ok {
				done.Add(1)
			}
			return err
		})
	})

	var recounts int
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) || recounts < 20; recounts++ {
		require.NoError(t, jobs.RecountQueues(ctx, b.pool, 10*time.Second))
		counter, truth := b.counterAndTruth(t)
		require.GreaterOrEqual(t, counter, truth, "recount %d gave back a place that is taken", recounts)
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	require.Positive(t, inserted.Load())
	require.Positive(t, undone.Load())
	require.Positive(t, done.Load())

	require.NoError(t, jobs.RecountQueues(ctx, b.pool, 10*time.Second))
	counter, truth := b.counterAndTruth(t)
	require.Positive(t, truth)
	require.Equal(t, truth, counter, "after %d recounts under writers and one after them", recounts)
}
