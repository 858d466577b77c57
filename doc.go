// Package ferry is a Postgres-native job queue service built on River.
//
// River carries the durable half: jobs are rows in river_job, worked by any
// replica, retried with backoff, rescued when a worker dies, inserted in the
// caller's transaction. ferry composes River with what production apps keep
// getting wrong: a leader layer that owns the singletons, a scheduler whose
// every tick becomes a job exactly once, an outbox, Telegram bots, and
// the ops surfaces (the enqueue CLI, the admin console, Prometheus metrics).
// docs/README.md maps a page to each; docs/configuration.md lists every
// setting.
//
// # Embedding
//
// A service embeds ferry in its own binary to work its own kinds beside
// ferry's built-in ones:
//
//	srv, err := ferry.New(ctx, ferry.Config{
//		Database: ferry.DatabaseConfig{URL: os.Getenv("DATABASE_URL")},
//		Queues:   ferry.QueuesConfig{Workers: map[string]int{"default": 100, "billing": 20}},
//		Kinds:    []jobs.Kind{jobs.Define[SendInvoiceArgs](&SendInvoiceWorker{}, "billing", "send one invoice")},
//	})
//	if err != nil { … }
//	err = srv.Run(ctx) // until ctx is cancelled, then a graceful stop
//
// Config has a section per capability (Database, Queues, Leader,
// Liveness, Admin, Outbox, Telegram, Broadcast, Seal, Retention); each
// setting's field declares its environment variable and flag in its tags,
// so that ferrycli.WorkerConfig reads a Config from the same FERRY_*
// variables and flags as `worker run`.
//
// Services that only insert use jobs.Inserter (or their own River client)
// inside their own transactions.
//
// # Lifecycle
//
// New validates the Config, connects, and checks the schema (or migrates it
// with Config.Database.Migrate). Run publishes the registered kinds to ferry_job_kind,
// starts the admin server and the River client, then the elector, the local
// schedules and the outbox relay, and works jobs until its context ends.
// Then it resigns the leadership, stops fetching, gives running jobs
// Config.Queues.ShutdownGrace to finish, and cancels the rest: River puts an
// interrupted job back to available without counting the attempt. A job is
// never lost to a deploy. A start that fails midway stops what started
// before it, River included. Run runs once (a second call returns
// ErrRunTwice); a Server that is built but never run is released with Close.
//
// Every long-running part of ferry has one lifecycle shape, River's
// startstop.Service: Start returns once the part runs (a second Start does
// nothing), Stop stops it and waits (safe twice, and before Start), Started
// and Stopped signal. The elector, the local scheduler (periodic.Scheduler),
// the outbox relay and the admin server have it. Work that runs only on the
// leader (the durable scheduler, the Telegram pollers, the retentions,
// Config.Leader.Runnables) is an election.Runnable instead: a function whose
// context is the leader's term, started by the elector at the start of each
// term, cancelled at its end, and restarted with backoff if it fails while
// the term lasts.
//
// # Defaults
//
// River's out-of-the-box fetch settings (100 ms cooldown, 1 s poll) cap a
// queue at about MaxWorkers jobs per 100 ms and put pickup p99 near 100 ms.
// ferry defaults to River's least cooldown, 1 ms, and a 100 ms poll,
// measured here at a pickup p50 of 1.6 ms and p99 of 6 ms at 500 jobs/s
// (its inserters notify at most every 1 ms too), and a backlog worked at
// 0.92 to 1.0 of bare River at River's own bench settings
// (docs/tuning.md).
package ferry
