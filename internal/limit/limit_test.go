package limit

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/pilot"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
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

// A job's key for a limit is the database's (migration 032's
// ferry_limit_key, which the park reads): a string as it is, any other
// JSON value as written, ” when the field is missing or null or the
// args are no object; past 128 characters cut and suffixed with a hash
// of the whole, so that two long values stay apart.
func TestLimitKey(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	key := func(args, field string) string {
		t.Helper()
		var k string
		require.NoError(t, pool.QueryRow(ctx, `SELECT ferry_limit_key($1::jsonb, $2)`, args, field).Scan(&k))
		return k
	}
	assert.Equal(t, "acme", key(`{"tenant":"acme","n":1}`, "tenant"))
	assert.Equal(t, "42", key(`{"tenant":42}`, "tenant"))
	assert.Equal(t, `{"a": 1}`, key(`{"tenant":{"a":1}}`, "tenant"))
	assert.Equal(t, "", key(`{"tenant":null}`, "tenant"))
	assert.Equal(t, "", key(`{}`, "tenant"))
	assert.Equal(t, "", key(`[1]`, "tenant"))
	long := strings.Repeat("é", 200)
	k1, k2 := key(`{"t":"`+long+`"}`, "t"), key(`{"t":"`+long+`x"}`, "t")
	assert.Equal(t, 128, utf8.RuneCountInString(k1))
	assert.NotEqual(t, k1, k2)
	assert.True(t, strings.HasPrefix(k1, "é"))
}

// testArgs is the job of these tests: it sleeps, as a tenant.
type testArgs struct {
	SleepMS int    `json:"sleep_ms"`
	Tenant  string `json:"tenant,omitempty"`
	// FailFirst fails the job's first attempt (after its sleep).
	FailFirst bool `json:"fail_first,omitempty"`
}

func (testArgs) Kind() string { return "limit.test" }

// recorder records when each job's work starts and ends, in this process,
// and how many run at once, overall and per tenant.
type recorder struct {
	mu        sync.Mutex
	running   map[string]int
	max       map[string]int
	starts    []time.Time
	tenants   []string // each start's tenant, in order
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
	r.tenants = append(r.tenants, tenant)
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
	case <-ctx.Done():
		return ctx.Err()
	}
	if job.Args.FailFirst && job.Attempt == 1 {
		return errors.New("the first attempt fails")
	}
	return nil
}

// NextRetry retries a failed job at once: it becomes available, and parks.
func (w *testWorker) NextRetry(*river.Job[testArgs]) time.Time { return time.Now() }

type harness struct {
	pool    *pgxpool.Pool
	rec     *recorder
	clients []*river.Client[pgx.Tx]
}

// newHarness starts n River clients on one database, each with a Limiter
// of its own claiming through the client's pilot (as n worker processes
// would have), limits registered, and the first one's sweep running when
// sweep is set. poll is the clients' fetch poll interval (20 ms when 0).
func newHarness(t *testing.T, n int, limits []Limit, sweep bool, poll time.Duration) *harness {
	t.Helper()
	h := &harness{pool: pgtest.PoolFor(t, pgtest.NewDatabase(t, true)), rec: newRecorder()}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	poll = cmp.Or(poll, 20*time.Millisecond)
	for i := range n {
		l, err := New(Config{Pool: h.pool, Limits: limits, Lead: 20 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, l.Register(ctx))
		if sweep && i == 0 {
			wg.Go(func() { _ = l.Sweeper()(ctx) })
		}
		p := &pilot.Pilot{}
		require.NoError(t, p.SetClaim(l.Claim))
		workers := river.NewWorkers()
		river.AddWorker(workers, &testWorker{rec: h.rec})
		client, err := river.NewClient(pilot.NewDriver(riverpgxv5.New(h.pool), p), &river.Config{
			ID:                fmt.Sprintf("limit-test-%d", i),
			FetchCooldown:     5 * time.Millisecond,
			FetchPollInterval: poll,
			Logger:            slog.New(slog.DiscardHandler),
			Middleware:        []rivertype.Middleware{l.Middleware()},
			Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 20}},
			TestOnly:          true,
			Workers:           workers,
		})
		require.NoError(t, err)
		wg.Go(func() { _ = l.Run(ctx) })
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

// requireGatedAtMost: every job of rows was parked behind its gate and
// claimed from it, and at most most ran at once.
func (h *harness) requireGatedAtMost(t *testing.T, rows []*rivertype.JobRow, most int) {
	t.Helper()
	for _, j := range rows {
		assert.NotZero(t, gateOf(t, j), "job %d was parked behind its gate", j.ID)
	}
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	assert.Equal(t, most, h.rec.maxTotal, "at most %d at once, and the limit used", most)
}

// gateOf is the gate a job was parked behind (0: none).
func gateOf(t *testing.T, j *rivertype.JobRow) int64 {
	var md struct {
		Gate int64 `json:"ferry_gate"`
	}
	require.NoError(t, json.Unmarshal(j.Metadata, &md))
	return md.Gate
}

func TestConcurrency_NeverExceededAcrossWorkers(t *testing.T) {
	h := newHarness(t, 3, []Limit{{Kind: "limit.test", Concurrency: 3}}, true, 0)
	args := make([]testArgs, 45)
	for i := range args {
		args[i] = testArgs{SleepMS: 60}
	}
	ids := h.insert(t, args...)
	rows := h.waitCompleted(t, ids, time.Minute)
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	assert.Equal(t, 3, h.rec.maxTotal, "at most 3 at once across three clients of 20 workers each, and the limit used")
	for _, j := range rows {
		assert.Equal(t, 1, j.Attempt, "job %d: waiting burns no attempt", j.ID)
		assert.Empty(t, j.Errors, "job %d", j.ID)
		assert.NotZero(t, gateOf(t, j), "job %d was parked behind its gate and claimed from it", j.ID)
		assert.NotContains(t, string(j.Metadata), "snoozes", "job %d never snoozed", j.ID)
	}
	var parked int
	require.NoError(t, h.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state = 'pending'`).Scan(&parked))
	assert.Zero(t, parked)
}

func TestConcurrency_PerKey(t *testing.T) {
	h := newHarness(t, 2, []Limit{{Kind: "limit.test", KeyField: "tenant", Concurrency: 1}}, true, 0)
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

// With a poll of a minute and no sweep, a parked job can only start
// because the job before it ended and its end woke the queue.
func TestConcurrency_EndWakesTheQueue(t *testing.T) {
	h := newHarness(t, 2, []Limit{{Kind: "limit.test", Concurrency: 1}}, false, time.Minute)
	ids := h.insert(t, testArgs{SleepMS: 300}, testArgs{SleepMS: 10}, testArgs{SleepMS: 10})
	rows := h.waitCompleted(t, ids, 30*time.Second)
	for _, j := range rows {
		assert.Equal(t, 1, j.Attempt)
	}
	assert.Equal(t, 1, h.rec.maxTotal)
}

// A job that fails is retried as a job under its limit: made available
// for its retry, it parks again and waits its turn; the limit holds
// across the retries.
func TestConcurrency_RetryParksAgain(t *testing.T) {
	h := newHarness(t, 2, []Limit{{Kind: "limit.test", Concurrency: 2}}, true, 0)
	args := make([]testArgs, 12)
	for i := range args {
		args[i] = testArgs{SleepMS: 50, FailFirst: i%2 == 0}
	}
	rows := h.waitCompleted(t, h.insert(t, args...), time.Minute)
	for i, j := range rows {
		assert.Equal(t, 1+map[bool]int{true: 1}[args[i].FailFirst], j.Attempt, "job %d", j.ID)
	}
	h.requireGatedAtMost(t, rows, 2)
}

// A job made available with its time still ahead (River's short snooze
// leaves a job available, due later) parks at once, and is claimed only
// when due.
func TestClaim_WaitsForScheduledAt(t *testing.T) {
	h := newHarness(t, 1, []Limit{{Kind: "limit.test", Concurrency: 5}}, false, 0)
	ctx := context.Background()
	var id int64
	require.NoError(t, h.pool.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		VALUES ('{}', 'limit.test', 25, 'default', 'available', now() + interval '1500 milliseconds') RETURNING id`).Scan(&id))
	var state string
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
	require.Equal(t, "pending", state, "parked at once")
	time.Sleep(time.Second)
	require.NoError(t, h.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
	assert.Equal(t, "pending", state, "not claimed before it is due")
	rows := h.waitCompleted(t, []int64{id}, 10*time.Second)
	assert.False(t, rows[0].AttemptedAt.Before(rows[0].ScheduledAt), "claimed at or after its time")
}

// A workflow's steps under a limit: a step released by its dependencies
// parks behind the limit like any job, and the workflow completes with
// the limit held.
func TestConcurrency_WorkflowSteps(t *testing.T) {
	h := newHarness(t, 2, []Limit{{Kind: "limit.test", Concurrency: 1}}, true, 0)
	ctx := context.Background()
	ins, err := jobs.NewInserter(h.pool, jobs.WithSealKeys(nil))
	require.NoError(t, err)
	wf := workflow.New("limited")
	for _, name := range []string{"a", "b", "c"} {
		wf.Add(name, testArgs{SleepMS: 100})
	}
	wf.Add("d", testArgs{SleepMS: 50}, workflow.After("a", "b", "c"))
	var res *workflow.Result
	require.NoError(t, pgx.BeginFunc(ctx, h.pool, func(tx pgx.Tx) error {
		res, err = workflow.InsertTx(ctx, tx, ins, wf)
		return err
	}))
	var ids []int64
	for _, id := range res.Jobs {
		ids = append(ids, id)
	}
	h.requireGatedAtMost(t, h.waitCompleted(t, ids, 30*time.Second), 1)
}

// A parked job is not written while it waits: its row version stays the
// same while the clients fetch every 20 ms and the limit is full.
func TestConcurrency_ParkedJobsAreNotWritten(t *testing.T) {
	h := newHarness(t, 2, []Limit{{Kind: "limit.test", Concurrency: 1}}, true, 0)
	ctx := context.Background()
	args := make([]testArgs, 50)
	for i := range args {
		args[i] = testArgs{SleepMS: 3000}
	}
	h.insert(t, args...)
	versions := func() map[int64]string {
		rows, err := h.pool.Query(ctx, `SELECT id, xmin::text || ctid::text FROM river_job WHERE state = 'pending'`)
		require.NoError(t, err)
		out := map[int64]string{}
		for rows.Next() {
			var id int64
			var v string
			require.NoError(t, rows.Scan(&id, &v))
			out[id] = v
		}
		require.NoError(t, rows.Err())
		return out
	}
	require.Eventually(t, func() bool { return len(versions()) == 49 }, 10*time.Second, 10*time.Millisecond, "one runs, 49 parked")
	before := versions()
	time.Sleep(time.Second)
	after := versions()
	require.Len(t, after, 49)
	assert.Equal(t, before, after, "no parked job was written while it waited")
}

func TestRate_NoWindowOverTheRate(t *testing.T) {
	h := newHarness(t, 3, []Limit{{Kind: "limit.test", Rate: Rate{Count: 20, Period: time.Second, Burst: 1}}}, true, 0)
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
	// taken in this process after their turn, a few milliseconds later
	// (and the turns are on the database's clock); the window is
	// shortened by that much slack.
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

// The claim's plan follows the generic cell rate algorithm: after a quiet
// spell, burst jobs at once, then one an interval, within the lead; and a
// concurrency limit of the same gate caps it.
func TestPlan_Turns(t *testing.T) {
	rate := &Limit{Name: "r", Rate: Rate{Count: 10, Period: time.Second, Burst: 3}}
	conc := &Limit{Name: "c", Concurrency: 4}
	limits := map[string]*Limit{"r": rate, "c": conc}
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	g := gate{id: 1, parts: []part{{name: "r"}}}
	st := map[part]*partState{{name: "r"}: {}}
	var turns []time.Duration
	n, _ := plan([]gate{g}, nil, st, limits, now, 250*time.Millisecond, 100, func(_ int, at time.Time) { turns = append(turns, at.Sub(now)) }, 100)
	assert.Equal(t, []int{5}, n)
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{0, 0, 0, 100 * ms, 200 * ms}, turns, "three at once, then one each 100 ms up to the lead")
	assert.Equal(t, now.Add(500*ms), st[part{name: "r"}].tat, "tat: the last turn plus an interval, ahead by burst-1 intervals")

	// The same gate under a concurrency of 4 with 2 running: 2.
	g2 := gate{id: 2, parts: []part{{name: "c"}, {name: "r"}}}
	st2 := map[part]*partState{{name: "r"}: {}, {name: "c"}: {running: 2}}
	n2, _ := plan([]gate{g2}, nil, st2, limits, now, 250*time.Millisecond, 100, nil)
	assert.Equal(t, []int{2}, n2)
	assert.Equal(t, 2, st2[part{name: "c"}].running, "sizing spends a copy")
	// At most maxJobs in all.
	n3, _ := plan([]gate{g2}, nil, st2, limits, now, 250*time.Millisecond, 1, nil)
	assert.Equal(t, []int{1}, n3)
}

func TestList_ShowsUseAndWaiting(t *testing.T) {
	h := newHarness(t, 1, []Limit{{Name: "tenants", Kind: "limit.test", KeyField: "tenant", Concurrency: 1}}, false, 0)
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

// A limit that no worker has marked seen for ten minutes is gone from
// every config: the sweep frees the jobs parked behind it, which park
// again behind the limits left (or none), so that removing a limit never
// strands its jobs. A limit registered anew parks the jobs that became
// available before it.
func TestSweep_GoneAndNewLimits(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	state := func(id int64) (string, int64) {
		var st string
		var gate int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT state, coalesce((metadata->>'ferry_gate')::bigint, 0) FROM river_job WHERE id = $1`, id).Scan(&st, &gate))
		return st, gate
	}
	early, err := client.Insert(ctx, testArgs{}, nil)
	require.NoError(t, err)
	assert.Equal(t, rivertype.JobStateAvailable, early.Job.State, "no limit yet")

	l, err := New(Config{Pool: pool, Limits: []Limit{{Name: "kept", Kind: "limit.test", Concurrency: 1}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	_, err = pool.Exec(ctx, `INSERT INTO ferry_limit (name, queue, concurrency) VALUES ('removed', 'default', 1)`)
	require.NoError(t, err)
	both, err := client.Insert(ctx, testArgs{}, nil)
	require.NoError(t, err)
	other, err := client.Insert(ctx, otherArgs{}, nil)
	require.NoError(t, err)
	st, bothGate := state(both.Job.ID)
	assert.Equal(t, "pending", st, "parked behind kept and removed")
	st, otherGate := state(other.Job.ID)
	assert.Equal(t, "pending", st, "parked behind removed")
	assert.NotEqual(t, bothGate, otherGate)

	_, err = pool.Exec(ctx, `UPDATE ferry_limit SET seen_at = now() - interval '11 minutes' WHERE name = 'removed'`)
	require.NoError(t, err)
	require.NoError(t, l.Sweep(ctx))
	st, gate := state(both.Job.ID)
	assert.Equal(t, "pending", st, "parked again, behind kept alone")
	assert.NotEqual(t, bothGate, gate)
	var parts string
	require.NoError(t, pool.QueryRow(ctx, `SELECT parts::text FROM ferry_limit_gate WHERE id = $1`, gate).Scan(&parts))
	assert.JSONEq(t, `[["kept", ""]]`, parts)
	st, gate = state(other.Job.ID)
	assert.Equal(t, "available", st, "under no limit now: River fetches it")
	assert.Zero(t, gate)
	st, gate = state(early.Job.ID)
	assert.Equal(t, "pending", st, "the job available before kept was registered is parked behind it")
	assert.NotZero(t, gate)
}

type otherArgs struct{}

func (otherArgs) Kind() string { return "limit.other" }

// A job that a worker claims while the sweep parks the jobs left
// available is left running: Postgres checks a row changed under an
// UPDATE against its WHERE again, and the sweep's tests the state there,
// not only in the subquery that found the job (which saw it available).
func TestSweep_NeverParksAClaimedJob(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state)
		VALUES ('{}', 'limit.test', 25, 'default', 'available') RETURNING id`).Scan(&id))
	l, err := New(Config{Pool: pool, Limits: []Limit{{Name: "late", Kind: "limit.test", Concurrency: 1}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx)) // registered after the job became available

	// A worker's fetch (River's, the job being available) claims the job
	// and has not committed yet.
	claim, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = claim.Rollback(ctx) }()
	res, err := riverpgxv5.New(nil).UnwrapExecutor(claim).JobGetAvailable(ctx, &riverdriver.JobGetAvailableParams{
		ClientID: "worker", MaxAttemptedBy: 100, MaxToLock: 1, Queue: "default",
	})
	require.NoError(t, err)
	require.Len(t, res.Jobs, 1, "River's fetch claims the job left available")

	swept := make(chan error, 1)
	go func() { swept <- l.Sweep(ctx) }()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE 'UPDATE river_job%')`).Scan(&waiting))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the sweep waits for the claim's row")
	require.NoError(t, claim.Commit(ctx))
	require.NoError(t, <-swept)

	var state string
	require.NoError(t, pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&state))
	assert.Equal(t, "running", state, "the claimed job still runs in its worker's name")
}
