// Command rescueworker is a test binary of the end-to-end tests
// (internal/e2e/rescue_test.go): ferry's `worker` command, built with
// ferrycli as a user's own worker binary would be, plus two job kinds for
// tests that kill workers under their jobs.
//
//   - test.sleep (queue default) sleeps args.sleeps[attempt-1], or the last
//     entry for later attempts, so that a test can tell attempts apart:
//     {"sleeps":["1h","0s"]} holds the first attempt and completes any
//     later one at once. A cancelled sleep fails the attempt.
//   - test.crash (queue crash) exits the process with code 3 from its Work,
//     as a job that brings its worker down does (a crash in C code, an OOM
//     kill): the poison job of the rescue tests.
//   - test.record (queue default) records its every start, step and
//     cancellation in the table record_event of RECORD_DATABASE_URL (a
//     connection of its own, straight to the server: what it records is
//     not held back by a fault of the worker's network). Attempts up to
//     args.hold step every 50 ms until their context ends; later ones
//     complete at once. A step is taken only after the context was read
//     alive: the job's effects.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/ferrycli"
	"github.com/ferryq/ferry/jobs"
)

// CrashExitCode is the exit code of a process that worked test.crash.
const CrashExitCode = 3

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	app := ferrycli.WorkerApp(ferrycli.WorkerOptions{Kinds: []jobs.Kind{
		jobs.Define[sleepArgs](&sleepWorker{}, river.QueueDefault, "sleeps args.sleeps[attempt-1] (the last for later attempts)"),
		jobs.Define[crashArgs](&crashWorker{}, "crash", "exits its worker's process with code 3"),
		jobs.Define[recordArgs](&recordWorker{}, river.QueueDefault, "records its starts, steps and cancellation in record_event"),
	}})
	app.Name = "rescueworker"
	code := ferrycli.Run(ctx, app, os.Args)
	stop()
	os.Exit(code)
}

// sleepArgs are the args of test.sleep.
type sleepArgs struct {
	Sleeps []jobs.Duration `json:"sleeps"`
}

func (sleepArgs) Kind() string { return "test.sleep" }

type sleepWorker struct {
	river.WorkerDefaults[sleepArgs]
}

func (w *sleepWorker) Work(ctx context.Context, job *river.Job[sleepArgs]) error {
	s := job.Args.Sleeps
	if len(s) == 0 {
		return nil
	}
	d := time.Duration(s[min(job.Attempt, len(s))-1])
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("test.sleep: attempt %d's sleep of %s cut short: %w", job.Attempt, d, context.Cause(ctx))
	}
}

// crashArgs are the args of test.crash.
type crashArgs struct{}

func (crashArgs) Kind() string { return "test.crash" }

type crashWorker struct {
	river.WorkerDefaults[crashArgs]
}

func (w *crashWorker) Work(context.Context, *river.Job[crashArgs]) error {
	fmt.Fprintln(os.Stderr, "test.crash: exiting the process")
	os.Exit(CrashExitCode)
	return nil
}

// recordArgs are the args of test.record.
type recordArgs struct {
	Hold int `json:"hold"`
}

func (recordArgs) Kind() string { return "test.record" }

type recordWorker struct {
	river.WorkerDefaults[recordArgs]

	once sync.Once
	pool *pgxpool.Pool
	err  error
}

// record writes one event of job's attempt, with cause (for a
// cancellation), under a context of its own: a cancelled job still
// records that it saw the cancellation.
func (w *recordWorker) record(job *river.Job[recordArgs], event, cause string) error {
	w.once.Do(func() {
		url := os.Getenv("RECORD_DATABASE_URL")
		if url == "" {
			w.err = errors.New("test.record: RECORD_DATABASE_URL is not set")
			return
		}
		w.pool, w.err = pgxpool.New(context.Background(), url)
	})
	if w.err != nil {
		return w.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := w.pool.Exec(ctx, `INSERT INTO record_event (job_id, attempt, client_id, event, cause)
		VALUES ($1, $2, $3, $4, $5)`, job.ID, job.Attempt, job.AttemptedBy[len(job.AttemptedBy)-1], event, cause)
	return err
}

func (w *recordWorker) Work(ctx context.Context, job *river.Job[recordArgs]) error {
	if err := w.record(job, "start", ""); err != nil {
		return err
	}
	if job.Attempt > job.Args.Hold {
		return nil
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if ctx.Err() != nil {
			cause := context.Cause(ctx)
			if err := w.record(job, "cancelled", cause.Error()); err != nil {
				return err
			}
			return cause
		}
		if err := w.record(job, "step", ""); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}
