// Command chaosworker is the chaos suite's worker (tools/chaos builds and runs
// it): ferry's own worker stack, plus what the suite's oracle needs to see
// from inside.
//
//   - kind chaos.effect: sleeps for sleep_ms, when set (the suite's long
//     jobs), or until the time until, when set (its marathon jobs, with no
//     job timeout: every attempt ends at that same time), then inserts its key into chaos_effect in the same transaction
//     that completes the job (river.JobCompleteTx), so an effect exists
//     exactly when its job completed, and a second effect of one key would
//     mean two attempts completed it; a failed attempt is retried after a
//     second (NextRetry), so that a retry fits in the run;
//   - kind chaos.step, a workflow's step: at its start it records itself
//     (chaos_wf_start) and, as a violation (chaos_wf_violation), any
//     dependency not completed in the committed rows and any completed
//     dependency whose output it cannot read; it sleeps sleep_ms, adds the
//     steps add names to its workflow (workflow.AddTx) in the transaction
//     that completes it, and records its name as its output;
//   - kind chaos.debounced, inserted with a debounce key: at its start it
//     records itself (chaos_db_run) with how many other jobs of its key
//     River shows running, then sleeps sleep_ms;
//   - kind chaos.limited, under a concurrency limit per tenant (the
//     suite's FERRY_CONFIG): at its start it records itself
//     (chaos_limit_run) with how many other jobs of its tenant River shows
//     running, then sleeps sleep_ms;
//   - kind chaos.fair, on queue chaos_fair, shared by weight across its
//     sources (the suite's FERRY_CONFIG fairness): at its start it records
//     itself (chaos_fair_run), then sleeps sleep_ms;
//   - a leader runnable that records when this process starts and stops
//     acting as leader (chaos_leader_run), so the oracle can check that no
//     two processes' runnables overlap in time.
//
// Everything else (schedules, outbox routes) comes from FERRY_CONFIG.
package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/loop"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

// EffectArgs are the args of chaos.effect.
type EffectArgs struct {
	Key     string    `json:"key"`
	SleepMS int       `json:"sleep_ms,omitempty"`
	Until   time.Time `json:"until,omitzero"`
}

// Kind implements river.JobArgs.
func (EffectArgs) Kind() string { return "chaos.effect" }

type effectWorker struct {
	river.WorkerDefaults[EffectArgs]
	pool func() *pgxpool.Pool
}

func (w *effectWorker) Work(ctx context.Context, job *river.Job[EffectArgs]) error {
	d := time.Duration(job.Args.SleepMS) * time.Millisecond
	if !job.Args.Until.IsZero() {
		d = time.Until(job.Args.Until)
	}
	if err := loop.Sleep(ctx, d); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, w.pool(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO chaos_effect (key, job_id) VALUES ($1, $2)", job.Args.Key, job.ID); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// Timeout is none for a marathon job, which ends at its own time (and
// River's rescuer leaves alone a running job with no timeout), and ferry's
// job timeout for the others.
func (w *effectWorker) Timeout(job *river.Job[EffectArgs]) time.Duration {
	if !job.Args.Until.IsZero() {
		return -1
	}
	return 0
}

// NextRetry retries a failed attempt after a second rather than on River's
// backoff (16 s after the second attempt, 81 s after the third), so that
// the retries of the suite's faults are worked within the run by River
// itself, with no harness hand in them.
func (w *effectWorker) NextRetry(*river.Job[EffectArgs]) time.Time {
	return time.Now().Add(time.Second)
}

// StepArgs are the args of chaos.step.
type StepArgs struct {
	SleepMS int      `json:"sleep_ms,omitempty"`
	Add     []string `json:"add,omitempty"`
}

// Kind implements river.JobArgs.
func (StepArgs) Kind() string { return "chaos.step" }

type stepWorker struct {
	river.WorkerDefaults[StepArgs]
	pool func() *pgxpool.Pool
}

func (w *stepWorker) Work(ctx context.Context, job *river.Job[StepArgs]) error {
	pool := w.pool()
	id, step, ok := workflow.FromJob(job.JobRow)
	if !ok {
		return errors.New("chaos.step: not a workflow's step")
	}
	if _, err := pool.Exec(ctx, `INSERT INTO chaos_wf_start (job_id, workflow, step) VALUES ($1, $2, $3)`, job.ID, id, step); err != nil {
		return err
	}
	var open, completed int
	if err := pool.QueryRow(ctx, `SELECT
    count(*) FILTER (WHERE j.state IS DISTINCT FROM 'completed' AND NOT s.ignore_failed_deps),
    count(*) FILTER (WHERE j.state = 'completed')
FROM ferry_workflow_dep e
JOIN ferry_workflow_step s ON s.job_id = e.step
LEFT JOIN river_job j ON j.id = e.depends_on
WHERE e.step = $1`, job.ID).Scan(&open, &completed); err != nil {
		return err
	}
	outputs, err := workflow.Outputs(ctx, pool, job.JobRow)
	if err != nil {
		return err
	}
	if open > 0 || len(outputs) < completed {
		if _, err := pool.Exec(ctx, `INSERT INTO chaos_wf_violation (job_id, workflow, step, open_deps, outputs_missing) VALUES ($1, $2, $3, $4, $5)`,
			job.ID, id, step, open, completed-len(outputs)); err != nil {
			return err
		}
	}
	if err := loop.Sleep(ctx, time.Duration(job.Args.SleepMS)*time.Millisecond); err != nil {
		return err
	}
	if err := river.RecordOutput(ctx, step); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if len(job.Args.Add) > 0 {
			steps := make([]workflow.Step, len(job.Args.Add))
			for i, n := range job.Args.Add {
				steps[i] = workflow.Step{Name: n, Args: StepArgs{SleepMS: job.Args.SleepMS}}
			}
			if _, err := workflow.AddTx(ctx, tx, river.ClientFromContext[pgx.Tx](ctx), job.JobRow, steps...); err != nil {
				return err
			}
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

// NextRetry retries a failed step after a second, as chaos.effect.
func (w *stepWorker) NextRetry(*river.Job[StepArgs]) time.Time { return time.Now().Add(time.Second) }

// DebouncedArgs are the args of chaos.debounced: the debounce key it was
// inserted with, and the producer's sequence number of the insert.
type DebouncedArgs struct {
	Key     string `json:"key"`
	Seq     int    `json:"seq"`
	SleepMS int    `json:"sleep_ms,omitempty"`
}

// Kind implements river.JobArgs.
func (DebouncedArgs) Kind() string { return "chaos.debounced" }

type debouncedWorker struct {
	river.WorkerDefaults[DebouncedArgs]
	pool func() *pgxpool.Pool
}

// Work records its start (chaos_db_run) with the number of other jobs of
// its key that River shows running at that moment (any is two runs at
// once), then sleeps.
func (w *debouncedWorker) Work(ctx context.Context, job *river.Job[DebouncedArgs]) error {
	if _, err := w.pool().Exec(ctx, `INSERT INTO chaos_db_run (job_id, key, seq, others)
VALUES ($1, $2, $3, (SELECT count(*) FROM river_job
                     WHERE kind = 'chaos.debounced' AND state = 'running' AND id <> $1 AND args->>'key' = $2))`,
		job.ID, job.Args.Key, job.Args.Seq); err != nil {
		return err
	}
	if err := loop.Sleep(ctx, time.Duration(job.Args.SleepMS)*time.Millisecond); err != nil {
		return err
	}
	return nil
}

// NextRetry retries a failed run after a second, as chaos.effect.
func (w *debouncedWorker) NextRetry(*river.Job[DebouncedArgs]) time.Time {
	return time.Now().Add(time.Second)
}

// LimitedArgs are the args of chaos.limited: its tenant (the limit's key)
// and how long it runs.
type LimitedArgs struct {
	Tenant  string `json:"tenant"`
	SleepMS int    `json:"sleep_ms,omitempty"`
}

// Kind implements river.JobArgs.
func (LimitedArgs) Kind() string { return "chaos.limited" }

type limitedWorker struct {
	river.WorkerDefaults[LimitedArgs]
	pool func() *pgxpool.Pool
}

// Work records its start (chaos_limit_run) with the number of other jobs
// of its tenant that River shows running at that moment (a killed
// worker's count until ferry's rescue settles them, as the limit counts
// them), then sleeps.
func (w *limitedWorker) Work(ctx context.Context, job *river.Job[LimitedArgs]) error {
	if _, err := w.pool().Exec(ctx, `INSERT INTO chaos_limit_run (job_id, tenant, others)
VALUES ($1, $2, (SELECT count(*) FROM river_job
                 WHERE kind = 'chaos.limited' AND state = 'running' AND id <> $1 AND args->>'tenant' = $2))`,
		job.ID, job.Args.Tenant); err != nil {
		return err
	}
	return loop.Sleep(ctx, time.Duration(job.Args.SleepMS)*time.Millisecond)
}

// NextRetry retries a failed run after a second, as chaos.effect.
func (w *limitedWorker) NextRetry(*river.Job[LimitedArgs]) time.Time {
	return time.Now().Add(time.Second)
}

// FairArgs are the args of chaos.fair: its source (the fairness's key)
// and how long it runs.
type FairArgs struct {
	Source  string `json:"source"`
	SleepMS int    `json:"sleep_ms,omitempty"`
}

// Kind implements river.JobArgs.
func (FairArgs) Kind() string { return "chaos.fair" }

// fairQueue is the queue the suite shares by weight across the sources of
// chaos.fair (its FERRY_CONFIG's fairness and queues).
const fairQueue = "chaos_fair"

type fairWorker struct {
	river.WorkerDefaults[FairArgs]
	pool func() *pgxpool.Pool
}

// Work records its start (chaos_fair_run), then sleeps.
func (w *fairWorker) Work(ctx context.Context, job *river.Job[FairArgs]) error {
	if _, err := w.pool().Exec(ctx, `INSERT INTO chaos_fair_run (job_id, source) VALUES ($1, $2)`, job.ID, job.Args.Source); err != nil {
		return err
	}
	return loop.Sleep(ctx, time.Duration(job.Args.SleepMS)*time.Millisecond)
}

// NextRetry retries a failed run after a second, as chaos.effect.
func (w *fairWorker) NextRetry(*river.Job[FairArgs]) time.Time {
	return time.Now().Add(time.Second)
}

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var srv *ferry.Server
	w := &effectWorker{pool: func() *pgxpool.Pool { return srv.Pool() }}
	sw := &stepWorker{pool: func() *pgxpool.Pool { return srv.Pool() }}
	dw := &debouncedWorker{pool: func() *pgxpool.Pool { return srv.Pool() }}
	lw := &limitedWorker{pool: func() *pgxpool.Pool { return srv.Pool() }}
	fw := &fairWorker{pool: func() *pgxpool.Pool { return srv.Pool() }}
	var err error
	srv, err = ferry.New(ctx, ferry.Config{
		Database: ferry.DatabaseConfig{URL: os.Getenv("DATABASE_URL"), SessionURL: os.Getenv("FERRY_SESSION_DATABASE_URL"), Pooler: os.Getenv("FERRY_POOLER")},
		Leader: ferry.LeaderConfig{Tick: time.Second, StandbyProbe: time.Second, Runnables: []ferry.LeaderRunnable{{Name: "chaos-marker", Run: func(ctx context.Context) error {
			return leaderMarker(ctx, srv)
		}}}},
		Admin:      ferry.AdminConfig{Addr: "off"},
		ConfigFile: os.Getenv("FERRY_CONFIG"),
		// Set by chaos -pgbouncer: job traffic through the pooler, sessions
		// direct.
		Kinds: []jobs.Kind{jobs.Define[EffectArgs](w, river.QueueDefault, "chaos: a job with a once-only effect"),
			jobs.Define[StepArgs](sw, river.QueueDefault, "chaos: a workflow's step that checks its dependencies"),
			jobs.Define[DebouncedArgs](dw, river.QueueDefault, "chaos: a debounced job that records its runs"),
			jobs.Define[LimitedArgs](lw, river.QueueDefault, "chaos: a job under a concurrency limit per tenant that records its runs"),
			jobs.Define[FairArgs](fw, fairQueue, "chaos: a job of a queue shared by weight across its sources that records its runs")},
		Logger: log,
	})
	if err != nil {
		log.Error("chaos worker: start", "error", err)
		os.Exit(1)
	}
	if err := srv.Run(ctx); err != nil {
		log.Error("chaos worker: run", "error", err)
		os.Exit(1)
	}
}

// leaderMarker records this process's leadership in chaos_leader_run: a row
// when it starts, stopped_at when its context ends (a demotion, a
// resignation). A process killed with SIGKILL leaves stopped_at empty; the
// suite knows when it killed it.
func leaderMarker(ctx context.Context, srv *ferry.Server) error {
	pool := srv.Pool()
	var id int64
	err := pool.QueryRow(ctx, "INSERT INTO chaos_leader_run (pid, term, started_at) VALUES ($1, $2, clock_timestamp()) RETURNING id",
		os.Getpid(), srv.Elector().Term()).Scan(&id)
	if err != nil {
		return err
	}
	<-ctx.Done()
	// The moment this process stopped acting, recorded even if the database
	// is away right now (a Postgres restart demotes the leader): retried for
	// a while, with the time taken when the context ended.
	stopped := time.Now()
	deadline := stopped.Add(15 * time.Second)
	for time.Now().Before(deadline) {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_, err := pool.Exec(sctx, "UPDATE chaos_leader_run SET stopped_at = $2 WHERE id = $1", id, stopped)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}
