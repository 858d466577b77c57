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
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

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
