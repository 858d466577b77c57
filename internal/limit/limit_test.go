package limit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestParseRate(t *testing.T) {
	for in, want := range map[string][2]any{
		"10/s": {10, time.Second}, " 600 / m": {600, time.Minute}, "1/h": {1, time.Hour},
	} {
		n, p, err := ParseRate(in)
		require.NoError(t, err, in)
		assert.Equal(t, want[0], n, in)
		assert.Equal(t, want[1], p, in)
	}
	for _, bad := range []string{"", "10", "10/d", "0/s", "-1/s", "x/s", "1.5/s", "2000000/s"} {
		_, _, err := ParseRate(bad)
		assert.Error(t, err, bad)
	}
}

func TestCheck(t *testing.T) {
	ok := Limit{Name: "email", Kind: "email.send", Concurrency: 2}
	_, err := ok.Check()
	require.NoError(t, err)
	for field, l := range map[string]Limit{
		"kind, queue":       {Name: "x", Concurrency: 1},
		"name":              {Name: "has space", Kind: "k", Concurrency: 1},
		"key":               {Name: "x", Kind: "k", KeyField: "a.b", Concurrency: 1},
		"concurrency, rate": {Name: "x", Kind: "k"},
		"concurrency":       {Name: "x", Kind: "k", Concurrency: -1},
		"burst":             {Name: "x", Kind: "k", Rate: Rate{Count: 1, Period: time.Second}},
	} {
		got, err := l.Check()
		assert.Error(t, err, field)
		assert.Equal(t, field, got)
	}
	_, err = New(Config{Limits: []Limit{ok, ok}})
	assert.ErrorContains(t, err, `limit "email": name: given twice`)
}

func TestKeyOf(t *testing.T) {
	assert.Equal(t, "acme", KeyOf([]byte(`{"tenant":"acme","n":1}`), "tenant"))
	assert.Equal(t, "42", KeyOf([]byte(`{"tenant":42}`), "tenant"))
	assert.Equal(t, `{"a":1}`, KeyOf([]byte(`{"tenant":{"a":1}}`), "tenant"))
	assert.Equal(t, "", KeyOf([]byte(`{"tenant":null}`), "tenant"))
	assert.Equal(t, "", KeyOf([]byte(`{}`), "tenant"))
	assert.Equal(t, "", KeyOf([]byte(`[1]`), "tenant"))
	long := strings.Repeat("é", 200)
	k1, k2 := KeyOf([]byte(`{"t":"`+long+`"}`), "t"), KeyOf([]byte(`{"t":"`+long+`x"}`), "t")
	assert.LessOrEqual(t, len(k1), maxKeyLen)
	assert.NotEqual(t, k1, k2)
	assert.True(t, strings.HasPrefix(k1, "é"))
}

// testArgs is the job of these tests: it sleeps, as a tenant.
type testArgs struct {
	SleepMS int    `json:"sleep_ms"`
	Tenant  string `json:"tenant,omitempty"`
}

func (testArgs) Kind() string { return "limit.test" }

// recorder records when each job's work starts and ends, in this process,
// and how many run at once, overall and per tenant.
type recorder struct {
	mu        sync.Mutex
	running   map[string]int
	max       map[string]int
	starts    []time.Time
	total     int
	maxTotal  int
	completed map[int64]bool
}

func newRecorder() *recorder {
	return &recorder{running: map[string]int{}, max: map[string]int{}, completed: map[int64]bool{}}
}

func (r *recorder) begin(tenant string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[tenant]++
	r.max[tenant] = max(r.max[tenant], r.running[tenant])
	r.total++
	r.maxTotal = max(r.maxTotal, r.total)
	r.starts = append(r.starts, time.Now())
}

func (r *recorder) end(tenant string, id int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.running[tenant]--
	r.total--
	r.completed[id] = true
}

type testWorker struct {
	river.WorkerDefaults[testArgs]
	rec *recorder
}

func (w *testWorker) Work(ctx context.Context, job *river.Job[testArgs]) error {
	w.rec.begin(job.Args.Tenant)
	defer w.rec.end(job.Args.Tenant, job.ID)
	select {
	case <-time.After(time.Duration(job.Args.SleepMS) * time.Millisecond):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type harness struct {
	pool    *pgxpool.Pool
	rec     *recorder
	clients []*river.Client[pgx.Tx]
}

// newHarness starts n River clients on one database, each with a Limiter
// of its own (as n worker processes would have), limits registered, and
// the first one's sweep running when sweep is set.
func newHarness(t *testing.T, n int, limits []Limit, sweep bool, cfg Config) *harness {
	t.Helper()
	h := &harness{pool: pgtest.PoolFor(t, pgtest.NewDatabase(t, true)), rec: newRecorder()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for i := range n {
		c := cfg
		c.Pool, c.Limits, c.Lead = h.pool, limits, 20*time.Millisecond
		l, err := New(c)
		require.NoError(t, err)
		t.Cleanup(l.Wait) // after the client stopped (cleanups run last first)
		require.NoError(t, l.Register(ctx))
		if sweep && i == 0 {
			wg.Go(func() { _ = l.Sweeper()(ctx) })
		}
		workers := river.NewWorkers()
		river.AddWorker(workers, &testWorker{rec: h.rec})
		client, err := river.NewClient(riverpgxv5.New(h.pool), &river.Config{
			ID:                fmt.Sprintf("limit-test-%d", i),
			FetchCooldown:     5 * time.Millisecond,
			FetchPollInterval: 20 * time.Millisecond,
			Logger:            slog.New(slog.DiscardHandler),
			Middleware:        []rivertype.Middleware{l.Middleware()},
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
			TestOnly:          true,
			Workers:           workers,
		})
		require.NoError(t, err)
		events, unsubscribe := client.Subscribe(river.EventKindJobSnoozed)
		t.Cleanup(unsubscribe)
		wg.Go(func() { _ = l.Run(ctx, events) })
		require.NoError(t, client.Start(ctx))
		t.Cleanup(func() {
			sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer scancel()
			assert.NoError(t, client.Stop(sctx))
		})
		h.clients = append(h.clients, client)
	}
	return h
}

func (h *harness) insert(t *testing.T, args ...testArgs) []int64 {
	t.Helper()
	params := make([]river.InsertManyParams, len(args))
	for i, a := range args {
		params[i] = river.InsertManyParams{Args: a}
	}
	res, err := h.clients[0].InsertMany(context.Background(), params)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// waitCompleted waits until every job is completed in the database and
// returns their rows.
func (h *harness) waitCompleted(t *testing.T, ids []int64, within time.Duration) []*rivertype.JobRow {
	t.Helper()
	var rows []*rivertype.JobRow
	require.Eventually(t, func() bool {
		res, err := h.clients[0].JobList(context.Background(), river.NewJobListParams().IDs(ids...).First(len(ids)))
		require.NoError(t, err)
		rows = res.Jobs
		return len(rows) == len(ids) && !slices.ContainsFunc(rows, func(j *rivertype.JobRow) bool {
			return j.State != rivertype.JobStateCompleted
		})
	}, within, 20*time.Millisecond)
	return rows
}

func snoozes(t *testing.T, j *rivertype.JobRow) int {
	var md struct {
		Snoozes int `json:"snoozes"`
	}
	require.NoError(t, json.Unmarshal(j.Metadata, &md))
	return md.Snoozes
}

func TestConcurrency_NeverExceededAcrossWorkers(t *testing.T) {
	h := newHarness(t, 3, []Limit{{Kind: "limit.test", Concurrency: 3}}, true, Config{})
	args := make([]testArgs, 45)
	for i := range args {
		args[i] = testArgs{SleepMS: 60}
	}
	ids := h.insert(t, args...)
	rows := h.waitCompleted(t, ids, time.Minute)
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	assert.Equal(t, 3, h.rec.maxTotal, "at most 3 at once across three clients of 20 workers each, and the limit used")
	waited := 0
	for _, j := range rows {
		assert.Equal(t, 1, j.Attempt, "job %d: waiting burns no attempt", j.ID)
		assert.Empty(t, j.Errors, "job %d", j.ID)
		if snoozes(t, j) > 0 {
			waited++
		}
	}
	assert.Positive(t, waited, "jobs over the limit waited (snoozed)")
	// Releases are made in the background, just after the job.
	require.Eventually(t, func() bool {
		var slots, waits int
		require.NoError(t, h.pool.QueryRow(context.Background(),
			`SELECT (SELECT count(*) FROM ferry_limit_slot), (SELECT count(*) FROM ferry_limit_wait)`).Scan(&slots, &waits))
		return slots == 0 && waits == 0
	}, 10*time.Second, 10*time.Millisecond, "every slot given back, nobody left waiting")
}

func TestConcurrency_PerKey(t *testing.T) {
	h := newHarness(t, 2, []Limit{{Kind: "limit.test", KeyField: "tenant", Concurrency: 1}}, true, Config{})
	var args []testArgs
	for i := range 16 {
		args = append(args, testArgs{SleepMS: 50, Tenant: []string{"acme", "globex"}[i%2]})
	}
	h.waitCompleted(t, h.insert(t, args...), time.Minute)
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	assert.Equal(t, 1, h.rec.max["acme"])
	assert.Equal(t, 1, h.rec.max["globex"])
	assert.Equal(t, 2, h.rec.maxTotal, "one key's limit never holds back the other's")
}

// With a backstop of an hour and no sweep, a waiting job can only start
// because the job before it handed its slot on.
func TestConcurrency_WaitingJobWokenByRelease(t *testing.T) {
	h := newHarness(t, 2, []Limit{{Kind: "limit.test", Concurrency: 1}}, false, Config{Backstop: time.Hour})
	ids := h.insert(t, testArgs{SleepMS: 300}, testArgs{SleepMS: 10}, testArgs{SleepMS: 10})
	rows := h.waitCompleted(t, ids, 30*time.Second)
	for _, j := range rows {
		assert.Equal(t, 1, j.Attempt)
	}
	assert.Equal(t, 1, h.rec.maxTotal)
}

// A slot whose holder no longer runs (its release was lost: the process
// was killed, and ferry's rescue settled the job) is taken back by the
// next job that asks.
func TestConcurrency_StaleSlotTakenBack(t *testing.T) {
	h := newHarness(t, 1, []Limit{{Name: "one", Kind: "limit.test", Concurrency: 1}}, false, Config{Backstop: time.Hour})
	ctx := context.Background()
	// A job of another kind, finished: the holder whose release never came.
	res, err := h.clients[0].Insert(ctx, testArgs{}, &river.InsertOpts{Queue: "elsewhere"})
	require.NoError(t, err)
	_, err = h.clients[0].JobCancel(ctx, res.Job.ID)
	require.NoError(t, err)
	_, err = h.pool.Exec(ctx, `INSERT INTO ferry_limit_slot (limit_name, key, job_id, started) VALUES ('one', '', $1, true)`, res.Job.ID)
	require.NoError(t, err)
	h.waitCompleted(t, h.insert(t, testArgs{SleepMS: 10}), 30*time.Second)
}

func TestRate_NoWindowOverTheRate(t *testing.T) {
	h := newHarness(t, 3, []Limit{{Kind: "limit.test", Rate: Rate{Count: 20, Period: time.Second, Burst: 1}}}, true, Config{})
	args := make([]testArgs, 50)
	ids := h.insert(t, args...)
	rows := h.waitCompleted(t, ids, time.Minute)
	for _, j := range rows {
		assert.Equal(t, 1, j.Attempt, "job %d: waiting burns no attempt", j.ID)
	}
	h.rec.mu.Lock()
	starts := slices.Clone(h.rec.starts)
	h.rec.mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	require.Len(t, starts, len(ids))
	// In any window of w, at most burst + rate*w start. The starts are
	// taken in this process after the database granted them, a few
	// milliseconds later; the window is shortened by that much slack.
	for _, w := range []time.Duration{time.Second, 500 * time.Millisecond} {
		most := 1 + int(20*w.Seconds())
		for i := range starts {
			j := i
			for j < len(starts) && starts[j].Sub(starts[i]) < w-20*time.Millisecond {
				j++
			}
			assert.LessOrEqual(t, j-i, most, "starts within %s of the start at %d", w, i)
		}
	}
	// 50 starts at 20/s with a burst of 1 take at least 49 intervals.
	assert.GreaterOrEqual(t, starts[len(starts)-1].Sub(starts[0]), 49*50*time.Millisecond-100*time.Millisecond)
}

func TestList_ShowsUseAndWaiting(t *testing.T) {
	h := newHarness(t, 1, []Limit{{Name: "tenants", Kind: "limit.test", KeyField: "tenant", Concurrency: 1}}, false, Config{Backstop: time.Hour})
	ids := h.insert(t, testArgs{SleepMS: 2000, Tenant: "acme"})
	require.Eventually(t, func() bool {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		return h.rec.total == 1
	}, 10*time.Second, 10*time.Millisecond)
	ids = append(ids, h.insert(t, testArgs{SleepMS: 10, Tenant: "acme"})...)
	var st []Status
	require.Eventually(t, func() bool {
		var err error
		st, err = List(context.Background(), h.pool)
		require.NoError(t, err)
		return len(st) == 1 && st[0].Running == 1 && st[0].Waiting == 1
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, "tenants", st[0].Name)
	assert.Equal(t, "tenant", st[0].KeyField)
	assert.Equal(t, 1, st[0].Concurrency)
	assert.Equal(t, []KeyStatus{{Key: "acme", Running: 1, Waiting: 1}}, st[0].Keys)
	h.waitCompleted(t, ids, 30*time.Second)
	require.Eventually(t, func() bool {
		st, err := List(context.Background(), h.pool)
		require.NoError(t, err)
		return st[0].Running+st[0].Waiting == 0
	}, 10*time.Second, 10*time.Millisecond)
}

// In one batch, the slots handed to waiting jobs are taken before anyone
// else of the batch asks: a job without one is refused when they fill the
// limit, whatever the order of the batch.
func TestFlush_HandedSlotsCountFirst(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	l, err := New(Config{Pool: pool, Limits: []Limit{{Name: "three", Kind: "limit.test", Concurrency: 3}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	res, err := client.InsertMany(ctx, []river.InsertManyParams{{Args: testArgs{}}, {Args: testArgs{}}, {Args: testArgs{}}, {Args: testArgs{}}})
	require.NoError(t, err)
	var ids []int64
	for _, r := range res {
		ids = append(ids, r.Job.ID)
	}
	// Three jobs, available, were handed the three slots.
	_, err = pool.Exec(ctx, `INSERT INTO ferry_limit_slot (limit_name, key, job_id, started) SELECT 'three', '', id, false FROM unnest($1::bigint[]) AS id`, ids[1:])
	require.NoError(t, err)
	tg := l.targets(&rivertype.JobRow{Kind: "limit.test", EncodedArgs: []byte("{}")})
	batch := []*request{{jobID: ids[0], attempt: 1, ts: tg}}
	for _, id := range ids[1:] {
		batch = append(batch, &request{jobID: id, attempt: 1, ts: tg})
	}
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return l.flush(ctx, tx, batch) }))
	assert.False(t, batch[0].out.start, "the newcomer, first in the batch, finds the limit full")
	assert.True(t, batch[0].out.parked)
	for _, r := range batch[1:] {
		assert.True(t, r.out.start, "job %d holds a handed slot", r.jobID)
	}
}

// A limit that no worker has marked seen for ten minutes is gone from
// every config: the sweep wakes the jobs that wait for it and drops its
// slots, so that removing a limit never strands its jobs.
func TestSweep_GoneLimitWakesItsJobs(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	l, err := New(Config{Pool: pool, Limits: []Limit{{Name: "kept", Kind: "limit.test", Concurrency: 1}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	hour := time.Now().Add(time.Hour)
	res, err := client.InsertMany(ctx, []river.InsertManyParams{
		{Args: testArgs{}, InsertOpts: &river.InsertOpts{ScheduledAt: hour}},
		{Args: testArgs{}, InsertOpts: &river.InsertOpts{ScheduledAt: hour}},
	})
	require.NoError(t, err)
	gone, kept := res[0].Job.ID, res[1].Job.ID
	_, err = pool.Exec(ctx, `INSERT INTO ferry_limit (name, kind, concurrency, seen_at) VALUES ('removed', 'limit.test', 1, now() - interval '11 minutes')`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO ferry_limit_wait (limit_name, key, job_id) VALUES ('removed', '', $1), ('kept', '', $2)`, gone, kept)
	require.NoError(t, err)
	// The kept limit's only slot was handed to a job that is available
	// (about to be fetched), so that its waiting job stays; that job holds
	// a slot of the removed limit too.
	res2, err := client.Insert(ctx, testArgs{}, nil)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO ferry_limit_slot (limit_name, key, job_id, started) VALUES ('kept', '', $1, false), ('removed', '', $1, false)`, res2.Job.ID)
	require.NoError(t, err)

	require.NoError(t, l.Sweep(ctx))
	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, gone).Scan(&state))
	assert.Equal(t, "available", state, "the gone limit's job runs")
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, kept).Scan(&state))
	assert.Equal(t, "scheduled", state, "the kept limit's job waits on")
	var waits, removedSlots int
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ferry_limit_wait), (SELECT count(*) FROM ferry_limit_slot WHERE limit_name = 'removed')`).Scan(&waits, &removedSlots))
	assert.Equal(t, 1, waits)
	assert.Zero(t, removedSlots)
}

// A rate turn further than River's scheduler interval: the job comes back
// an interval early (River's scheduler may make it available up to an
// interval late) and snoozes the rest, which River leaves available to be
// fetched at its time.
func TestDecide_LongRateWaitComesBackEarly(t *testing.T) {
	l, err := New(Config{Limits: []Limit{{Name: "slow", Kind: "k", Rate: Rate{Count: 1, Period: time.Minute, Burst: 1}}}, Lead: 100 * time.Millisecond})
	require.NoError(t, err)
	tg := target{lim: &l.limits[0]}
	now := time.Now()
	tat := now.Add(20 * time.Second) // the next start allowed in 20 s
	rates := map[string]*rateState{tg.lockName(): {tat: &tat, now: now, due: map[int64]*time.Time{}}}
	_, out, due := l.decide(&request{jobID: 1, ts: []target{tg}}, nil, rates)
	require.NotNil(t, due)
	assert.Equal(t, tat, *due)
	assert.Equal(t, 20*time.Second-100*time.Millisecond-riverSchedulerInterval, out.snooze)

	// Back 3 s before its turn: the rest, at once.
	rates[tg.lockName()].now = tat.Add(-3 * time.Second)
	rates[tg.lockName()].due[1] = due
	_, out, _ = l.decide(&request{jobID: 1, ts: []target{tg}}, nil, rates)
	assert.Equal(t, 3*time.Second-100*time.Millisecond, out.snooze)
}
