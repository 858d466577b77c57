package jobs_test

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/seal"
)

// debounceInsert inserts args of kind with opts through ins, in a
// transaction of its own.
func debounceInsert(t *testing.T, pool *pgxpool.Pool, ins *jobs.Inserter, kind, args string, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	t.Helper()
	ctx := context.Background()
	var res *rivertype.JobInsertResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = ins.InsertTx(ctx, tx, jobs.RawArgs{KindName: kind, JSON: json.RawMessage(args)}, opts)
		return err
	})
	return res, err
}

// jobsOf is every job of kind: id, state, args, and seconds from the
// database's now to its scheduled_at.
func jobsOf(t *testing.T, pool *pgxpool.Pool, kind string) []struct {
	ID    int64
	State string
	Args  string
	InS   float64
} {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT id, state::text, args::text, extract(epoch FROM scheduled_at - now())::float8
FROM river_job WHERE kind = $1 ORDER BY id`, kind)
	require.NoError(t, err)
	defer rows.Close()
	var out []struct {
		ID    int64
		State string
		Args  string
		InS   float64
	}
	for rows.Next() {
		var j struct {
			ID    int64
			State string
			Args  string
			InS   float64
		}
		require.NoError(t, rows.Scan(&j.ID, &j.State, &j.Args, &j.InS))
		out = append(out, j)
	}
	require.NoError(t, rows.Err())
	return out
}

// Inserts with one key collapse into one job with the last insert's
// args, due a window after the last; another key is another job.
func TestDebounce_Collapses(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	kind := uniqueKind("debounce")
	opts := jobs.WithDebounce(&river.InsertOpts{Queue: insertQueue}, "user:42", time.Hour)

	first, err := debounceInsert(t, pool, ins, kind, `{"n":1}`, opts)
	require.NoError(t, err)
	require.False(t, first.UniqueSkippedAsDuplicate)
	require.Equal(t, rivertype.JobStateScheduled, first.Job.State)
	for _, args := range []string{`{"n":2}`, `{"n":3}`} {
		res, err := debounceInsert(t, pool, ins, kind, args, opts)
		require.NoError(t, err)
		require.True(t, res.UniqueSkippedAsDuplicate, "collapsed into the first")
		require.Equal(t, first.Job.ID, res.Job.ID)
		require.JSONEq(t, args, string(res.Job.EncodedArgs), "the job as it is now")
	}
	other, err := debounceInsert(t, pool, ins, kind, `{"n":9}`, jobs.WithDebounce(&river.InsertOpts{Queue: insertQueue}, "user:7", time.Hour))
	require.NoError(t, err)
	require.False(t, other.UniqueSkippedAsDuplicate)

	got := jobsOf(t, pool, kind)
	require.Len(t, got, 2, "one job per key")
	require.Equal(t, first.Job.ID, got[0].ID)
	require.JSONEq(t, `{"n":3}`, got[0].Args, "the last insert's args")
	require.Equal(t, "scheduled", got[0].State)
	require.InDelta(t, 3600, got[0].InS, 30, "due a window after the last insert")
}

// A debounced job parked behind a limit (it came due, and its kind is
// limited: migration 032) has not run: an insert of its key collapses
// into it, as into one scheduled.
func TestDebounce_CollapsesIntoAParkedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A database of its own: River's scheduler below makes every due job
	// of it available.
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	kind := uniqueKind("debounce_parked")
	_, err = pool.Exec(ctx, `INSERT INTO ferry_limit (name, kind, concurrency) VALUES ($1, $1, 1)`, kind)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `SELECT setval('ferry_limit_on', 1, true)`)
	require.NoError(t, err)
	opts := jobs.WithDebounce(&river.InsertOpts{Queue: insertQueue}, "user:42", time.Hour)

	first, err := debounceInsert(t, pool, ins, kind, `{"n":1}`, opts)
	require.NoError(t, err)
	// It comes due: River's scheduler (its own query, run as of a time
	// past the window) makes it available, and the park takes it.
	due := first.Job.ScheduledAt.Add(time.Second)
	scheduled, err := riverpgxv5.New(pool).GetExecutor().JobSchedule(ctx, &riverdriver.JobScheduleParams{Max: 10, Now: &due})
	require.NoError(t, err)
	require.Len(t, scheduled, 1)
	require.Equal(t, "pending", jobsOf(t, pool, kind)[0].State, "parked behind the limit")

	res, err := debounceInsert(t, pool, ins, kind, `{"n":2}`, opts)
	require.NoError(t, err)
	require.True(t, res.UniqueSkippedAsDuplicate, "collapsed into the parked job")
	require.Equal(t, first.Job.ID, res.Job.ID)
	got := jobsOf(t, pool, kind)
	require.Len(t, got, 1)
	require.JSONEq(t, `{"n":2}`, got[0].Args)
	require.Equal(t, "scheduled", got[0].State, "due a window after the last insert again")
}

// With max_wait, a run is due no later than max_wait after its first
// insert, however long the inserts go on.
func TestDebounce_MaxWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	kind := uniqueKind("debounce_max")
	opts := jobs.WithDebounce(&river.InsertOpts{Queue: insertQueue}, "stream", time.Hour, 2*time.Hour)
	first, err := debounceInsert(t, pool, ins, kind, `{"n":1}`, opts)
	require.NoError(t, err)
	// The first insert was 90 minutes ago: the stream has gone on since.
	_, err = pool.Exec(ctx, `UPDATE river_job SET created_at = created_at - interval '90 minutes' WHERE id = $1`, first.Job.ID)
	require.NoError(t, err)
	_, err = debounceInsert(t, pool, ins, kind, `{"n":2}`, opts)
	require.NoError(t, err)
	got := jobsOf(t, pool, kind)
	require.Len(t, got, 1)
	require.InDelta(t, 1800, got[0].InS, 30, "due at the first insert + 2h, not the last + 1h")
}

// An insert while the key's job runs schedules one run after it, with
// the last such insert's args: the runs never overlap, none is lost.
func TestDebounce_RunAfterTheRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)

	var (
		mu      sync.Mutex
		ran     []int
		running atomic.Int32
		overlap atomic.Bool
	)
	started := make(chan struct{}, 4)
	release := make(chan struct{})
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[debounceArgs]) error {
		if running.Add(1) > 1 {
			overlap.Store(true)
		}
		defer running.Add(-1)
		mu.Lock()
		ran = append(ran, job.Args.N)
		mu.Unlock()
		started <- struct{}{}
		if job.Args.N == 1 {
			<-release
		}
		return nil
	}))
	b := startClient(t, pool, workers)
	opts := jobs.WithDebounce(&river.InsertOpts{Queue: b.queue}, "report", 10*time.Millisecond)
	insert := func(n int) *rivertype.JobInsertResult {
		var res *rivertype.JobInsertResult
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			res, err = ins.InsertTx(ctx, tx, debounceArgs{N: n}, opts)
			return err
		}))
		return res
	}

	first := insert(1)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the first run did not start")
	}
	for n := 2; n <= 3; n++ {
		res := insert(n)
		require.True(t, res.UniqueSkippedAsDuplicate)
		require.Equal(t, first.Job.ID, res.Job.ID, "no second job while the first runs")
	}
	job, err := b.client.JobGet(ctx, first.Job.ID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateRunning, job.State)
	require.Contains(t, string(job.Metadata), `"ferry_debounce_next"`)
	close(release)

	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the run after did not start")
	}
	require.Eventually(t, func() bool { return running.Load() == 0 }, 10*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 3}, ran, "one run after, with the last insert's args")
	require.False(t, overlap.Load(), "never two at once")
	var jobsOfKey int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1`, b.queue).Scan(&jobsOfKey))
	require.Equal(t, 2, jobsOfKey)
}

type debounceArgs struct {
	N int `json:"n"`
}

func (debounceArgs) Kind() string { return "test.debounce_run" }

// Bad debounces are refused with one error each, and write nothing.
func TestDebounce_Refused(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	kind := uniqueKind("debounce_bad")
	base := &river.InsertOpts{Queue: insertQueue}
	for _, c := range []struct {
		opts *river.InsertOpts
		want string
	}{
		{jobs.WithDebounce(base, " ", time.Second), "jobs: debounce key is empty"},
		{jobs.WithDebounce(base, "k", 0), "jobs: debounce window 0s is under 1ms"},
		{jobs.WithDebounce(base, "k", time.Minute, time.Second), "jobs: debounce max wait 1s is under the window 1m0s (0 is none)"},
		{jobs.WithUniqueKey(jobs.WithDebounce(base, "k", time.Second), "u"), "jobs: a debounced insert cannot have a unique key too"},
	} {
		_, err := debounceInsert(t, pool, ins, kind, `{}`, c.opts)
		require.ErrorContains(t, err, c.want)
	}
	keys, err := seal.ParseKeys("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	require.NoError(t, err)
	sealed, err := jobs.NewInserter(pool, jobs.WithSealKeys(keys))
	require.NoError(t, err)
	_, err = debounceInsert(t, pool, sealed, kind, `{}`, jobs.WithDebounce(base, "k", time.Second))
	require.ErrorContains(t, err, "jobs: a debounced insert cannot be sealed")
	require.Empty(t, jobsOf(t, pool, kind), "nothing written")
}
