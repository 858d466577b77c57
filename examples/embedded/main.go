// Command embedded is a service that runs ferry's worker inside its own
// binary, with a job kind of its own, in one call: ferrycli.WorkerMain.
// The binary has the same commands, FERRY_* flags and environment
// variables, config file and exit codes as ferry's `worker`:
//
//	embedded migrate up
//	DATABASE_URL=postgres://… FERRY_QUEUES=default=100,greetings=10 embedded run
//	enqueue job greet.send --args '{"name":"Ada"}'
//
// Its kind, greet.send, runs in the queue greetings and logs one line per
// greeting. A schedule of the config file (FERRY_CONFIG) can name it like
// any built-in kind, and `enqueue job` knows it once the worker has run.
package main

import (
	"context"
	"errors"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/ferrycli"
	"github.com/ferryq/ferry/jobs"
)

// GreetArgs are the arguments of a greet.send job.
type GreetArgs struct {
	Name string `json:"name"`
}

// Kind implements river.JobArgs.
func (GreetArgs) Kind() string { return "greet.send" }

// GreetWorker sends one greeting; here, a log line.
type GreetWorker struct {
	river.WorkerDefaults[GreetArgs]
}

// Work implements river.Worker. A job without a name cannot succeed, so it
// is cancelled rather than retried.
func (GreetWorker) Work(ctx context.Context, job *river.Job[GreetArgs]) error {
	if job.Args.Name == "" {
		return river.JobCancel(errors.New("greet.send: args.name is empty"))
	}
	slog.InfoContext(ctx, "greet: sent", "name", job.Args.Name, "job_id", job.ID)
	return nil
}

func main() {
	ferrycli.WorkerMain(ferrycli.WorkerOptions{
		Kinds: []jobs.Kind{jobs.Define[GreetArgs](GreetWorker{}, "greetings", "sends one greeting")},
	})
}
