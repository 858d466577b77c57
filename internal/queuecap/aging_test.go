package queuecap

import (
	"context"
	"flag"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/pilot"
	"github.com/ferryq/ferry/jobs"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var update = flag.Bool("update", false, "write River's fetch query to testdata")

// sqlRecorder records the SQL of every query its connections send.
type sqlRecorder struct {
	mu  sync.Mutex
	sql []string
}

func (r *sqlRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sql = append(r.sql, data.SQL)
	return ctx
}

func (*sqlRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestAging_RiverFetchUnchanged fails when River's own fetch (the query
// its standard pilot sends for JobGetAvailable) is not the one the aging
// fetch was written from (testdata/river_fetch.sql): a River upgrade that
// changes it is a read of River's new query and an update of agingSQL
// (and of the testdata, with -update), never a silent drift.
func TestAging_RiverFetchUnchanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rec := &sqlRecorder{}
	pool := pgtest.TracedPoolFor(t, pgtest.NewDatabase(t, true), rec)

	p := &riverpilot.StandardPilot{}
	_, err := p.JobGetAvailable(ctx, riverpgxv5.New(pool).GetExecutor(), nil, &riverdriver.JobGetAvailableParams{
		ClientID: "c", MaxAttemptedBy: 100, MaxToLock: 10, Queue: "default",
	})
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.sql, 1, "River's fetch is one statement")
	if *update {
		require.NoError(t, os.WriteFile("testdata/river_fetch.sql", []byte(rec.sql[0]), 0o644))
	}
	want, err := os.ReadFile("testdata/river_fetch.sql")
	require.NoError(t, err)
	require.Equal(t, string(want), rec.sql[0],
		"River's fetch changed: read it, bring agingSQL in line, then go test -run TestAging_RiverFetchUnchanged -update")
}

// agingJobs inserts, in this order, jobs of these priorities that have
// waited these long (scheduled that long ago), and returns their ids.
func agingJobs(t *testing.T, pool *pgxpool.Pool, jobsOf []struct {
	priority int
	waited   time.Duration
},
) []int64 {
	t.Helper()
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil), jobs.WithSchema(""))
	require.NoError(t, err)
	var ids []int64
	for _, j := range jobsOf {
		res, err := ins.Client().Insert(context.Background(), jobs.NoopArgs{}, &river.InsertOpts{Priority: j.priority})
		require.NoError(t, err)
		require.Equal(t, rivertype.JobStateAvailable, res.Job.State)
		// Waited since then: River inserts a job given a scheduled_at as
		// scheduled, for its scheduler to make available.
		_, err = pool.Exec(context.Background(), `UPDATE river_job SET scheduled_at = scheduled_at - $2::interval WHERE id = $1`,
			res.Job.ID, j.waited)
		require.NoError(t, err)
		ids = append(ids, res.Job.ID)
	}
	return ids
}

// fetchOrder fetches one job at a time with the pilot until none is left,
// and returns the ids in the order they came.
func fetchOrder(t *testing.T, pool *pgxpool.Pool, p riverpilot.Pilot) []int64 {
	t.Helper()
	ctx := context.Background()
	var got []int64
	for {
		res, err := p.JobGetAvailable(ctx, riverpgxv5.New(pool).GetExecutor(), nil, &riverdriver.JobGetAvailableParams{
			ClientID: "aging-test", MaxAttemptedBy: 100, MaxToLock: 1, Queue: river.QueueDefault,
		})
		require.NoError(t, err)
		if len(res.Jobs) == 0 {
			return got
		}
		require.Len(t, res.Jobs, 1)
		j := res.Jobs[0]
		require.Equal(t, rivertype.JobStateRunning, j.State, "claimed as River claims")
		require.Equal(t, 1, j.Attempt)
		require.Equal(t, []string{"aging-test"}, j.AttemptedBy)
		require.NotNil(t, j.AttemptedAt)
		got = append(got, j.ID)
	}
}

// TestAging_FetchOrder: with aging of 10 s, a job counts one priority
// level higher per 10 s it has waited, up to 1, and the oldest of a level
// comes first; without aging, River's order (priority first) is kept.
func TestAging_FetchOrder(t *testing.T) {
	t.Parallel()
	spec := []struct {
		priority int
		waited   time.Duration
	}{
		{4, 35 * time.Second}, // 0: level 1 after three periods, the oldest
		{1, 0},                // 1
		{2, 11 * time.Second}, // 2: level 1 after one period
		{1, 0},                // 3
		{4, 15 * time.Second}, // 4: level 3, and older than 5
		{3, 0},                // 5: level 3
		{1, 0},                // 6
	}

	aging := &pilot.Pilot{}
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	require.NoError(t, aging.SetGetAvailable(agingFetch(pool, 10*time.Second)))
	ids := agingJobs(t, pool, spec)
	require.Equal(t, []int64{ids[0], ids[2], ids[1], ids[3], ids[6], ids[4], ids[5]}, fetchOrder(t, pool, aging))

	plain := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ids = agingJobs(t, plain, spec)
	require.Equal(t, []int64{ids[1], ids[3], ids[6], ids[2], ids[5], ids[0], ids[4]}, fetchOrder(t, plain, &pilot.Pilot{}),
		"without aging, River's own order")
}

// TestAging_RiverWorksInAgedOrder: a River client whose driver carries the
// aging pilot, one worker, works a priority-4 job that has waited past
// three periods before the priority-1 jobs inserted after it.
func TestAging_RiverWorksInAgedOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ids := agingJobs(t, pool, []struct {
		priority int
		waited   time.Duration
	}{{1, 0}, {1, 0}, {4, 4 * time.Second}, {1, 0}})

	p := &pilot.Pilot{}
	require.NoError(t, p.SetGetAvailable(agingFetch(pool, time.Second)))
	var (
		mu     sync.Mutex
		worked []int64
	)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[jobs.NoopArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		worked = append(worked, job.ID)
		return nil
	}))
	client, err := river.NewClient[pgx.Tx](pilot.NewDriver(riverpgxv5.New(pool), p), &river.Config{
		Queues:   map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers:  workers,
		TestOnly: true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(worked) == len(ids)
	}, 30*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, ids[2], worked[0], "the aged job first (worked %v of %v)", worked, ids)
	require.True(t, slices.Equal([]int64{ids[0], ids[1], ids[3]}, worked[1:]), "then the rest in River's order: %v", worked)
}

// TestSection_PriorityAgingChecked: aging is off (0) or at least a second.
func TestSection_PriorityAgingChecked(t *testing.T) {
	t.Parallel()
	sec := Section{}.WithDefaults()
	require.NoError(t, sec.Check())
	sec.PriorityAging = 10 * time.Second
	require.NoError(t, sec.Check())
	sec.PriorityAging = 500 * time.Millisecond
	require.ErrorContains(t, sec.Check(), "priority aging 500ms is below 1s (0 is off)")
	sec.PriorityAging = -time.Second
	require.ErrorContains(t, sec.Check(), "priority aging -1s is below 1s")
}
