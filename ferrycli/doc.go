// Package ferrycli is the command-line wiring of ferry's binaries, worker
// and enqueue. Their mains are a few lines that call it, end-to-end tests
// build the same apps, and a service that embeds ferry builds a worker
// binary of its own with the same commands, flags, environment variables
// and exit codes.
//
// # Apps
//
// WorkerApp returns the `worker` app (run, migrate, version); EnqueueApp
// returns the operator's `enqueue` app (job, bulk, jobs, dead, outbox,
// schedule, leader, workers, queues, broadcast, version). Both are urfave/cli/v2
// apps: rename one, or add commands of your own, before running it with
// Run. Each command documents itself: worker run --help, enqueue bulk
// --help.
//
// # A worker of one's own
//
// WorkerOptions carries what a binary adds to the configuration: its job
// kinds, schedules, outbox routes, Telegram command routers and leader
// runnables. Everything else comes from the flags and their environment
// variables (DATABASE_URL, FERRY_QUEUES, FERRY_CONFIG, OTEL_* …), as for
// ferry's own worker. WorkerMain is the whole main of such a binary (see
// examples/embedded):
//
//	func main() {
//		ferrycli.WorkerMain(ferrycli.WorkerOptions{
//			Kinds: []jobs.Kind{jobs.Define[SendInvoiceArgs](&SendInvoiceWorker{}, "billing", "send one invoice")},
//		})
//	}
//
// To add commands of your own, build the app with WorkerApp and run it
// with Run instead.
//
// To build the ferry.Config and call ferry.New yourself, give a command of
// your own the flags of WorkerFlags and read them with WorkerConfig.
//
// # Exit codes
//
// Run returns ExitOK (0) on success, ExitUsage (2) on bad input, with one
// line on stderr saying why and nothing written, ExitQueueFull (3) when an
// insert, or a retry of a finished job (`jobs retry`, `dead retry`), is
// refused because its queue is at its bound (jobs.ErrQueueFull; nothing
// written), and ExitFailure (1) on any other failure. Under --json that line is a JSON object, {"error": "…",
// "exit_code": 2}, and warnings (a job put in a queue no live worker works)
// are {"warning": "…"}. An error of a query on a table that does not exist
// says to run `worker migrate up`. An action of one's own reports bad input
// as a *UsageError.
//
// # Files
//
// worker.go holds the worker app and the mapping of its flags to a
// ferry.Config; enqueue.go, jobs.go, dead.go, outbox.go, schedule.go and
// leader.go the enqueue commands, and the bulk*.go files `enqueue bulk`;
// common.go holds Run, the shared flags and the table and JSON output;
// args.go lets flags follow positional arguments.
package ferrycli
