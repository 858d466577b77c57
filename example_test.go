package ferry_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// GreetArgs are the args of a job kind of the embedding service.
type GreetArgs struct {
	Name string `json:"name"`
}

// Kind implements river.JobArgs.
func (GreetArgs) Kind() string { return "greet.send" }

// GreetWorker sends one greeting; here, a line on stdout.
type GreetWorker struct {
	river.WorkerDefaults[GreetArgs]
	sent chan<- struct{}
}

// Work implements river.Worker.
func (w *GreetWorker) Work(ctx context.Context, job *river.Job[GreetArgs]) error {
	fmt.Println("hello,", job.Args.Name)
	w.sent <- struct{}{}
	return nil
}

// A service runs ferry's worker inside its own process, with a job kind of
// its own beside the built-in ones. Run works jobs until its context ends,
// then shuts down gracefully. (ferrycli.WorkerMain does the same from
// FERRY_* flags and environment variables.)
func ExampleNew() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := make(chan struct{})

	srv, err := ferry.New(ctx, ferry.Config{
		Database: ferry.DatabaseConfig{URL: exampleDatabaseURL()},
		Queues:   ferry.QueuesConfig{Workers: map[string]int{"default": 100, "greetings": 10}},
		Admin:    ferry.AdminConfig{Addr: "off"},
		Kinds:    []jobs.Kind{jobs.Define[GreetArgs](&GreetWorker{sent: sent}, "greetings", "sends one greeting")},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- srv.Run(ctx) }()
	<-srv.Started()

	// The server's River client inserts with ferry's middleware (seals,
	// bounded queues); InsertTx inserts in the service's own transaction.
	if _, err := srv.River().Insert(ctx, GreetArgs{Name: "Ada"}, nil); err != nil {
		log.Fatal(err)
	}
	<-sent

	cancel()
	fmt.Println("stopped:", <-stopped)

	// Output:
	// hello, Ada
	// stopped: <nil>
}

// exampleDatabaseURL is this package's test database, for runnable
// examples, which get no *testing.T.
func exampleDatabaseURL() string { return pgtest.ExampleURL() }
