package workflow_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stepArgs is the test kind: it records its start, checks there that
// every dependency has completed (the oracle of the release), records its
// name as its output, and fails when told.
type stepArgs struct {
	Name string `json:"name"`
	// Fail discards the job (it has one attempt) while failing[Name] is
	// set in the test's harness.
	Fail bool `json:"fail,omitempty"`
	// Block runs until the job's context is cancelled.
	Block bool `json:"block,omitempty"`
	// Stubborn runs until the harness's release channel is closed,
	// whatever its context says, then fails.
	Stubborn bool `json:"stubborn,omitempty"`
	// Add are steps the job adds to its workflow at run time, each named
	// and run as this kind; AddAfter are their dependencies.
	Add      []string `json:"add,omitempty"`
	AddAfter []string `json:"add_after,omitempty"`
	// Nested are what each added step adds in turn.
	Nested map[string][]string `json:"nested,omitempty"`
}

func (stepArgs) Kind() string { return "wf.test" }

// InsertOpts gives the test's steps one attempt: a failure discards.
func (stepArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 1} }

type harness struct {
	t    *testing.T
	pool *pgxpool.Pool
	ins  *jobs.Inserter

	mu       sync.Mutex
	started  []string
	early    []string // steps that started before a dependency completed
	failing  map[string]bool
	blocking chan string
	release  chan struct{}
}

type stepWorker struct {
	river.WorkerDefaults[stepArgs]
	h *harness
}

func (w *stepWorker) Work(ctx context.Context, job *river.Job[stepArgs]) error {
	h := w.h
	var open int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM ferry_workflow_dep e
JOIN ferry_workflow_step s ON s.job_id = e.step
LEFT JOIN river_job j ON j.id = e.depends_on
WHERE s.job_id = $1 AND NOT s.ignore_failed_deps AND s.mode = 'all' AND j.state IS DISTINCT FROM 'completed'`,
		job.ID).Scan(&open); err != nil {
		return err
	}
	h.mu.Lock()
	h.started = append(h.started, job.Args.Name)
	if open > 0 {
		h.early = append(h.early, job.Args.Name)
	}
	fail := job.Args.Fail && h.failing[job.Args.Name]
	h.mu.Unlock()
	if job.Args.Block {
		h.blocking <- job.Args.Name
		<-ctx.Done()
		return ctx.Err()
	}
	if job.Args.Stubborn {
		h.blocking <- job.Args.Name
		<-h.release
		return fmt.Errorf("failed after all")
	}
	if fail {
		return fmt.Errorf("told to fail")
	}
	if len(job.Args.Add) > 0 {
		tx, err := h.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit, a no-op
		var steps []workflow.Step
		for _, n := range job.Args.Add {
			steps = append(steps, workflow.Step{Name: n, Args: stepArgs{Name: n, Add: job.Args.Nested[n], Nested: job.Args.Nested}, DependsOn: job.Args.AddAfter})
		}
		if _, err := workflow.AddTx(ctx, tx, river.ClientFromContext[pgx.Tx](ctx), job.JobRow, steps...); err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	return river.RecordOutput(ctx, map[string]string{"name": job.Args.Name})
}

// newHarness starts a River client working wf.test jobs on a database of
// the test's own.
func newHarness(t *testing.T) *harness {
	t.Helper()
	return newHarnessOn(t, pgtest.NewDatabase(t, true))
}

// newHarnessOn starts the harness's River client on the database at url.
func newHarnessOn(t *testing.T, url string) *harness {
	t.Helper()
	pool := pgtest.PoolFor(t, url)
	h := &harness{t: t, pool: pool, ins: mustInserter(t, pool), failing: map[string]bool{}, blocking: make(chan string, 16), release: make(chan struct{})}
	h.startClient(pool, 20, nil)
	return h
}

// startClient starts a River client on pool working wf.test jobs with
// workers workers; logger nil is River's default.
func (h *harness) startClient(pool *pgxpool.Pool, workers int, logger *slog.Logger) {
	h.t.Helper()
	ws := river.NewWorkers()
	river.AddWorker(ws, &stepWorker{h: h})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            logger,
		TestOnly:          true,
	})
	require.NoError(h.t, err)
	ctx := context.Background()
	require.NoError(h.t, client.Start(ctx))
	h.t.Cleanup(func() {
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = client.StopAndCancel(stop)
	})
}

func (h *harness) insert(wf *workflow.Workflow) *workflow.Result {
	h.t.Helper()
	ctx := context.Background()
	tx, err := h.pool.Begin(ctx)
	require.NoError(h.t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	res, err := workflow.InsertTx(ctx, tx, h.ins, wf)
	require.NoError(h.t, err)
	require.NoError(h.t, tx.Commit(ctx))
	return res
}

// wait waits for workflow id to reach state, and returns it.
func (h *harness) wait(id, state string) *workflow.Info {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		in, err := workflow.Get(context.Background(), h.pool, id)
		require.NoError(h.t, err)
		if in.State == state {
			return in
		}
		if time.Now().After(deadline) {
			var open []string
			for _, s := range in.Steps {
				if s.FinalizedAt == nil {
					open = append(open, s.Name+":"+s.State)
				}
			}
			h.t.Fatalf("workflow %s is %s after 30 s, not %s; %d steps not finished: %v", id, in.State, state, len(open), open[:min(len(open), 10)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *harness) tx(fn func(tx pgx.Tx) error) error {
	ctx := context.Background()
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (h *harness) noEarlyStarts() {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(h.t, h.early, "steps started before every dependency completed")
}

func stepStates(in *workflow.Info) map[string]string {
	out := map[string]string{}
	for _, s := range in.Steps {
		out[s.Name] = s.State
	}
	return out
}

func mustJob(t *testing.T, h *harness, id int64) *rivertype.JobRow {
	t.Helper()
	job, err := h.ins.Client().JobGet(context.Background(), id)
	require.NoError(t, err)
	return job
}

// startedBefore requires that each of deps started before step.
func (h *harness) startedBefore(step string, deps ...string) {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	at := slices.Index(h.started, step)
	require.GreaterOrEqual(h.t, at, 0, "%s started", step)
	for _, d := range deps {
		i := slices.Index(h.started, d)
		require.True(h.t, i >= 0 && i < at, "%s started before %s: %v", d, step, h.started)
	}
}

func mustInserter(t *testing.T, pool *pgxpool.Pool) *jobs.Inserter {
	t.Helper()
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil), jobs.WithSchema(""))
	require.NoError(t, err)
	return ins
}
