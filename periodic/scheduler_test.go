package periodic

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// errStale is the fence error of a stale fakeLeader.
var errStale = errors.New("election: not the leader")

// fakeLeader holds a fixed term; stale makes its fence fail with errStale.
type fakeLeader struct {
	term  int64
	stale atomic.Bool
}

func (l *fakeLeader) Term() int64 { return l.term }

func (l *fakeLeader) Fence(context.Context, pgx.Tx) error {
	if l.stale.Load() {
		return errStale
	}
	return nil
}

// fakeClock's SleepUntil jumps to the wake time at once.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *fakeClock) SleepUntil(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	return nil
}

type testBundle struct {
	pool   *pgxpool.Pool
	leader *fakeLeader
	client *river.Client[pgx.Tx]
	logs   *logtest.Recorder
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	return &testBundle{pool: pool, leader: &fakeLeader{term: 7}, client: client, logs: &logtest.Recorder{}}
}

func (b *testBundle) scheduler(t *testing.T, clock Clock, schedules ...Schedule) *Scheduler {
	t.Helper()
	s, err := New(Config{
		Pool: b.pool, Inserter: b.client, Leader: b.leader, Schedules: schedules, Clock: clock,
		Logger: slog.New(slog.NewJSONHandler(b.logs, nil)),
	})
	require.NoError(t, err)
	return s
}

func noopSchedule(id string, every time.Duration) Schedule {
	return Schedule{ID: id, Name: "noop " + id, Trigger: Every(every), Args: jobs.NoopArgs{}}
}

type tickRow struct {
	At     time.Time
	Status string
	Reason *string
	JobID  *int64
	Term   int64
}

func ticks(t *testing.T, pool *pgxpool.Pool, id string) []tickRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT tick_at, status, reason, job_id, term FROM ferry_periodic_tick WHERE schedule_id = $1 ORDER BY tick_at", id)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tickRow])
	require.NoError(t, err)
	return out
}

func countJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job").Scan(&n))
	return n
}

func TestScheduler_ClaimOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sc := noopSchedule("race", time.Minute)
	s1 := b.scheduler(t, nil, sc)
	s2 := b.scheduler(t, nil, sc)
	require.NoError(t, s1.sync(ctx, time.Now()))

	// Two schedulers (two leaders, as a broken election would make) race on
	// the same ticks: each tick is recorded once and enqueues one job.
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		tick := base.Add(time.Duration(i) * time.Minute)
		for _, s := range []*Scheduler{s1, s2} {
			wg.Go(func() { require.NoError(t, s.claim(ctx, s.durable[0], tick, "")) })
		}
	}
	wg.Wait()
	got := ticks(t, b.pool, "race")
	require.Len(t, got, n)
	// Overlap skip applies: the first tick's job is never worked here, so
	// later ticks are skipped as overlapping. Allow overlap to count jobs.
	enqueued := 0
	for _, r := range got {
		if r.Status == "enqueued" {
			enqueued++
		}
		require.EqualValues(t, 7, r.Term, "ticks carry the leader's term")
	}
	require.Equal(t, enqueued, countJobs(t, b.pool), "one job per enqueued tick")

	// With overlap allowed, every tick enqueues exactly one job.
	sa := noopSchedule("race-allow", time.Minute)
	sa.Overlap = OverlapAllow
	a1, a2 := b.scheduler(t, nil, sa), b.scheduler(t, nil, sa)
	before := countJobs(t, b.pool)
	for i := range n {
		tick := base.Add(time.Duration(i) * time.Minute)
		for _, s := range []*Scheduler{a1, a2} {
			wg.Go(func() { require.NoError(t, s.claim(ctx, s.durable[0], tick, "")) })
		}
	}
	wg.Wait()
	require.Len(t, ticks(t, b.pool, "race-allow"), n)
	require.Equal(t, before+n, countJobs(t, b.pool))
}

func TestScheduler_Overlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s := b.scheduler(t, nil, noopSchedule("ov", time.Minute))
	require.NoError(t, s.sync(ctx, time.Now()))
	sc := s.durable[0]
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

	require.NoError(t, s.claim(ctx, sc, base, ""))
	require.NoError(t, s.claim(ctx, sc, base.Add(time.Minute), ""))
	got := ticks(t, b.pool, "ov")
	require.Equal(t, "enqueued", got[0].Status)
	require.Equal(t, "skipped", got[1].Status, "the first job is still available: overlap skips")
	require.Contains(t, *got[1].Reason, "overlap: previous run (job")
	require.Nil(t, got[1].JobID)

	// Once the previous job is finalized (River's JobCancel finalizes a job
	// that is not running at once), the next tick enqueues again.
	_, err := b.client.JobCancel(ctx, *got[0].JobID)
	require.NoError(t, err)
	require.NoError(t, s.claim(ctx, sc, base.Add(2*time.Minute), ""))
	got = ticks(t, b.pool, "ov")
	require.Equal(t, "enqueued", got[2].Status)

	var lastJob int64
	var lastStatus string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT last_job_id, last_status FROM ferry_schedule WHERE id = 'ov'").Scan(&lastJob, &lastStatus))
	require.Equal(t, *got[2].JobID, lastJob)
	require.Equal(t, "enqueued", lastStatus)
	require.Contains(t, b.logs.String(), `"msg":"periodic: tick enqueued"`)
	require.Contains(t, b.logs.String(), `"msg":"periodic: tick skipped"`)
}

func TestScheduler_CatchUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

	prepare := func(t *testing.T, sc Schedule) (*testBundle, *Scheduler) {
		t.Helper()
		b := setup(t)
		s := b.scheduler(t, nil, sc)
		require.NoError(t, s.sync(ctx, base))
		// The previous leader's last tick.
		require.NoError(t, s.claim(ctx, s.durable[0], base, ""))
		_, err := b.client.JobCancel(ctx, *ticks(t, b.pool, sc.ID)[0].JobID)
		require.NoError(t, err)
		return b, s
	}

	t.Run("latest within the misfire window is enqueued, older ones skipped", func(t *testing.T) {
		t.Parallel()
		b, s := prepare(t, noopSchedule("cu", time.Minute))
		now := base.Add(10*time.Minute + 30*time.Second)
		cursor, err := s.catchUp(ctx, s.durable[0], now)
		require.NoError(t, err)
		require.Equal(t, now, cursor)
		got := ticks(t, b.pool, "cu")
		require.Len(t, got, 11, "the old tick, 9 skipped, the latest enqueued")
		for _, r := range got[1:10] {
			require.Equal(t, "skipped", r.Status)
			require.Equal(t, "missed: no leader was running", *r.Reason)
		}
		require.Equal(t, base.Add(10*time.Minute), got[10].At.UTC())
		require.Equal(t, "enqueued", got[10].Status)
		require.Equal(t, 2, countJobs(t, b.pool), "never a burst of old ticks")
	})

	t.Run("catch_up none skips them all", func(t *testing.T) {
		t.Parallel()
		sc := noopSchedule("cu-none", time.Minute)
		sc.CatchUp = CatchUpNone
		b, s := prepare(t, sc)
		_, err := s.catchUp(ctx, s.durable[0], base.Add(3*time.Minute+time.Second))
		require.NoError(t, err)
		got := ticks(t, b.pool, "cu-none")
		require.Len(t, got, 4)
		require.Equal(t, "missed: catch_up is none", *got[3].Reason)
		require.Equal(t, 1, countJobs(t, b.pool))
	})

	t.Run("latest older than the misfire window is skipped", func(t *testing.T) {
		t.Parallel()
		sc := noopSchedule("cu-misfire", time.Minute)
		sc.Misfire = 10 * time.Second
		b, s := prepare(t, sc)
		_, err := s.catchUp(ctx, s.durable[0], base.Add(2*time.Minute+30*time.Second))
		require.NoError(t, err)
		got := ticks(t, b.pool, "cu-misfire")
		require.Len(t, got, 3)
		require.Equal(t, "skipped", got[2].Status)
		require.Contains(t, *got[2].Reason, "older than the misfire window (10s)")
		require.Equal(t, 1, countJobs(t, b.pool))
	})

	t.Run("a schedule that never ticked owes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := b.scheduler(t, nil, noopSchedule("fresh", time.Minute))
		now := base.Add(time.Hour)
		cursor, err := s.catchUp(ctx, s.durable[0], now)
		require.NoError(t, err)
		require.Equal(t, now, cursor)
		require.Empty(t, ticks(t, b.pool, "fresh"))
	})

	t.Run("a long outage records a bounded number of ticks", func(t *testing.T) {
		t.Parallel()
		b, s := prepare(t, noopSchedule("cu-long", time.Second))
		_, err := s.catchUp(ctx, s.durable[0], base.Add(24*time.Hour))
		require.NoError(t, err)
		require.Len(t, ticks(t, b.pool, "cu-long"), 1+maxMissedRecorded)
	})
}

// parkedClock stands still: SleepUntil reports each wake time on wakes and
// returns only when ctx ends, so a test sees Run's catch-up and nothing
// after it.
type parkedClock struct {
	now   time.Time
	wakes chan time.Time
}

func (c *parkedClock) Now() time.Time { return c.now }

func (c *parkedClock) SleepUntil(ctx context.Context, t time.Time) error {
	c.wakes <- t
	<-ctx.Done()
	return ctx.Err()
}

// TestScheduler_CatchUpLongInterval covers triggers whose Interval times
// maxMissedRecorded does not fit in a time.Duration (over about 106 days):
// the catch-up horizon must not overflow into the future and lose the
// missed tick.
func TestScheduler_CatchUpLongInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)

	for _, tc := range []struct {
		name    string
		expr    string
		now     time.Time   // when the new leader starts
		skipped []time.Time // missed ticks recorded as skipped
		latest  time.Time   // the latest missed tick, enqueued
		wake    time.Time   // the tick Run waits for next
	}{
		{
			name:   "yearly",
			expr:   "@yearly",
			now:    time.Date(2028, 1, 1, 6, 0, 0, 0, time.UTC),
			latest: time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC),
			wake:   time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC),
		},
		{
			name:    "every four months",
			expr:    "0 0 1 */4 *",
			now:     time.Date(2027, 9, 1, 6, 0, 0, 0, time.UTC),
			skipped: []time.Time{time.Date(2027, 5, 1, 0, 0, 0, 0, time.UTC)},
			latest:  time.Date(2027, 9, 1, 0, 0, 0, 0, time.UTC),
			wake:    time.Date(2028, 1, 1, 0, 0, 0, 0, time.UTC),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			trigger, err := ParseCron(tc.expr, "")
			require.NoError(t, err)
			require.Greater(t, trigger.Interval(), time.Duration(math.MaxInt64/maxMissedRecorded),
				"the case must be one whose horizon product overflows")
			sc := Schedule{ID: "long", Trigger: trigger, Args: jobs.NoopArgs{}, Overlap: OverlapAllow}

			// The previous leader's last tick.
			s := b.scheduler(t, nil, sc)
			require.NoError(t, s.sync(ctx, base))
			require.NoError(t, s.claim(ctx, s.durable[0], base, ""))

			// A new leader starts after the outage, twice (a restart after
			// its catch-up): the missed ticks are recorded once.
			for range 2 {
				clock := &parkedClock{now: tc.now, wakes: make(chan time.Time, 1)}
				s := b.scheduler(t, clock, sc)
				runCtx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- s.Run(runCtx) }()
				require.Equal(t, tc.wake, (<-clock.wakes).UTC(), "catch-up done, waiting for the next tick")
				cancel()
				require.NoError(t, <-done)
			}

			got := ticks(t, b.pool, "long")
			require.Len(t, got, 2+len(tc.skipped), "the old tick, the skipped ones, the latest")
			for i, at := range tc.skipped {
				require.Equal(t, at, got[1+i].At.UTC())
				require.Equal(t, "skipped", got[1+i].Status)
				require.Equal(t, "missed: no leader was running", *got[1+i].Reason)
			}
			last := got[len(got)-1]
			require.Equal(t, tc.latest, last.At.UTC())
			require.Equal(t, "enqueued", last.Status)
			require.NotNil(t, last.JobID)
			require.Equal(t, 2, countJobs(t, b.pool), "the old tick's job and the latest missed tick's")
		})
	}
}

func TestScheduler_StaleLeaderWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	s := b.scheduler(t, nil, noopSchedule("fenced", time.Minute))
	require.NoError(t, s.sync(ctx, time.Now()))
	b.leader.stale.Store(true)
	err := s.claim(ctx, s.durable[0], time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), "")
	require.ErrorIs(t, err, errStale)
	require.Empty(t, ticks(t, b.pool, "fenced"))
	require.Zero(t, countJobs(t, b.pool))
}

func TestScheduler_Run(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	sc := noopSchedule("every-minute", time.Minute)
	sc.Overlap = OverlapAllow
	clock := &fakeClock{now: time.Date(2027, 1, 1, 0, 0, 30, 0, time.UTC)}
	s := b.scheduler(t, clock, sc)
	// A schedule row of an older deployment is removed at start.
	_, err := b.pool.Exec(ctx, "INSERT INTO ferry_schedule (id, name, trigger, kind, queue) VALUES ('old', 'old', 'every 1h', 'ferry.noop', 'default')")
	require.NoError(t, err)

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	require.Eventually(t, func() bool { return len(ticks(t, b.pool, "every-minute")) >= 5 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-done)

	got := ticks(t, b.pool, "every-minute")
	for i, r := range got {
		require.Equal(t, time.Date(2027, 1, 1, 0, i+1, 0, 0, time.UTC), r.At.UTC(), "aligned ticks, one per minute")
		require.Equal(t, "enqueued", r.Status)
	}
	var ids []string
	rows, err := b.pool.Query(ctx, "SELECT id FROM ferry_schedule ORDER BY id")
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"every-minute"}, ids)
	next, ok := s.NextRun("every-minute")
	require.True(t, ok)
	require.False(t, next.IsZero())
}

func TestScheduler_StartLocal(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	clock := &fakeClock{now: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	s, err := New(Config{Clock: clock, Logger: slog.New(slog.DiscardHandler), Schedules: []Schedule{{
		ID: "cache", Local: true, Trigger: Every(time.Second),
		Run: func(context.Context) error {
			if runs.Add(1) == 2 {
				return errors.New("a failed run keeps the schedule")
			}
			return nil
		},
	}}})
	require.NoError(t, err)
	require.False(t, s.Durable())
	require.NoError(t, s.Start(context.Background()))
	require.NoError(t, s.Start(context.Background()), "a second Start is a no-op")
	<-s.Started()
	stopped := s.Stopped()
	require.Eventually(t, func() bool { return runs.Load() >= 5 }, 5*time.Second, time.Millisecond)
	s.Stop()
	s.Stop()
	<-stopped
}

func TestValidateSchedules(t *testing.T) {
	t.Parallel()
	ok := noopSchedule("a", time.Minute)
	for name, tc := range map[string]struct {
		in    []Schedule
		index int
		id    string
		want  string
	}{
		"bad id":          {[]Schedule{{ID: "has space", Trigger: Every(time.Minute), Args: jobs.NoopArgs{}}}, 0, "has space", `id "has space"`},
		"no trigger":      {[]Schedule{{ID: "x", Args: jobs.NoopArgs{}}}, 0, "x", "trigger: none given"},
		"no args":         {[]Schedule{ok, {ID: "x", Trigger: Every(time.Minute)}}, 1, "x", "args: a durable schedule needs"},
		"local with args": {[]Schedule{{ID: "x", Local: true, Trigger: Every(time.Minute), Args: jobs.NoopArgs{}, Run: func(context.Context) error { return nil }}}, 0, "x", "args: a local schedule"},
		"local no run":    {[]Schedule{{ID: "x", Local: true, Trigger: Every(time.Minute)}}, 0, "x", "run: a local schedule needs"},
		"bad catch_up":    {[]Schedule{{ID: "x", Trigger: Every(time.Minute), Args: jobs.NoopArgs{}, CatchUp: "all"}}, 0, "x", `catch_up "all"`},
		"bad overlap":     {[]Schedule{{ID: "x", Trigger: Every(time.Minute), Args: jobs.NoopArgs{}, Overlap: "queue"}}, 0, "x", `overlap "queue"`},
		"duplicate id":    {[]Schedule{ok, ok}, 1, "a", `schedule 1 (id "a"): id: already used by schedule 0`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := ValidateSchedules(tc.in)
			require.ErrorContains(t, err, tc.want)
			var se *ScheduleError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.index, se.Index)
			require.Equal(t, tc.id, se.ID)
		})
	}
	out, err := ValidateSchedules([]Schedule{ok})
	require.NoError(t, err)
	require.Equal(t, "noop a", out[0].Name)
	require.Equal(t, CatchUpLast, out[0].CatchUp)
	require.Equal(t, OverlapSkip, out[0].Overlap)
	require.Equal(t, time.Minute, out[0].Misfire, "misfire defaults to one interval")
}

func TestMulDuration(t *testing.T) {
	t.Parallel()
	year := 365 * 24 * time.Hour
	require.Equal(t, 1000*time.Minute, mulDuration(time.Minute, 1000))
	require.Equal(t, time.Duration(0), mulDuration(year, 0))
	require.Equal(t, time.Duration(math.MaxInt64), mulDuration(year, maxMissedRecorded), "saturates rather than wraps")
	require.Equal(t, time.Duration(math.MaxInt64), mulDuration(math.MaxInt64, 2))
}
