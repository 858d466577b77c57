package ferrycli_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/riverqueue/river"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/ferrycli"
	"github.com/ferryq/ferry/jobs"
)

// SendInvoiceArgs are the args of a service's own job kind.
type SendInvoiceArgs struct {
	InvoiceID int64 `json:"invoice_id"`
}

// Kind implements river.JobArgs.
func (SendInvoiceArgs) Kind() string { return "billing.send_invoice" }

// SendInvoiceWorker works billing.send_invoice.
type SendInvoiceWorker struct {
	river.WorkerDefaults[SendInvoiceArgs]
}

// Work implements river.Worker.
func (w *SendInvoiceWorker) Work(ctx context.Context, job *river.Job[SendInvoiceArgs]) error {
	return nil // send invoice job.Args.InvoiceID
}

// The main of a worker binary of one's own: ferry's worker app, with a kind
// of its own beside the built-in ones. It is run like ferry's worker:
//
//	billing-worker migrate up
//	FERRY_QUEUES=default=100,billing=20 billing-worker run
//
// (This example needs a database, so it is compiled, not run.)
func ExampleWorkerApp() {
	app := ferrycli.WorkerApp(ferrycli.WorkerOptions{
		Kinds: []jobs.Kind{jobs.Define[SendInvoiceArgs](&SendInvoiceWorker{}, "billing", "send one invoice")},
	})
	app.Name = "billing-worker"

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ferrycli.Run(ctx, app, os.Args)
	stop()
	os.Exit(code)
}

// A command of one's own reads the worker's flags (and their environment
// variables) into a ferry.Config, then adds to it before ferry.New.
func ExampleWorkerConfig() {
	app := &cli.App{
		Name:  "billing-worker",
		Flags: ferrycli.WorkerFlags(),
		Action: func(c *cli.Context) error {
			cfg, err := ferrycli.WorkerConfig(c)
			if err != nil {
				return err
			}
			cfg.Kinds = append(cfg.Kinds, jobs.Define[SendInvoiceArgs](&SendInvoiceWorker{}, "billing", "send one invoice"))
			fmt.Println("billing workers:", cfg.Queues.Workers["billing"], "shutdown grace:", cfg.Queues.ShutdownGrace)
			// srv, err := ferry.New(c.Context, cfg) … srv.Run(c.Context)
			return nil
		},
	}
	code := ferrycli.Run(context.Background(), app, []string{"billing-worker",
		"--database-url", "postgres://billing@db.internal/billing",
		"--queues", "default=100,billing=20",
		"--shutdown-grace", "1m",
	})
	fmt.Println("exit code:", code)

	// Output:
	// billing workers: 20 shutdown grace: 1m0s
	// exit code: 0
}
