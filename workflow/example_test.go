package workflow_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

// OrderStepArgs is one step of an order's fulfilment.
type OrderStepArgs struct {
	Order int    `json:"order"`
	Do    string `json:"do"`
}

// Kind implements river.JobArgs.
func (OrderStepArgs) Kind() string { return "order.step" }

// OrderStepWorker works order.step; here it does nothing.
type OrderStepWorker struct {
	river.WorkerDefaults[OrderStepArgs]
}

// Work implements river.Worker.
func (OrderStepWorker) Work(ctx context.Context, job *river.Job[OrderStepArgs]) error {
	return nil // charge, reserve, ship or notify job.Args.Order
}

// An order is charged and its stock reserved at once; it ships once both
// are done, and the customer hears of it once it shipped. The workflow is
// inserted in the service's transaction; the steps without dependencies
// are available at once, the others wait in River's pending state until
// their dependencies complete.
func Example() {
	ctx := context.Background()
	pool := examplePool()
	ins, err := jobs.NewInserter(pool)
	if err != nil {
		log.Fatal(err)
	}

	wf := workflow.New("order 1234")
	wf.Add("charge", OrderStepArgs{Order: 1234, Do: "charge"})
	wf.Add("reserve", OrderStepArgs{Order: 1234, Do: "reserve"})
	wf.Add("ship", OrderStepArgs{Order: 1234, Do: "ship"}, workflow.After("charge", "reserve"))
	wf.Add("notify", OrderStepArgs{Order: 1234, Do: "notify"}, workflow.After("ship"))
	var res *workflow.Result
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err = workflow.InsertTx(ctx, tx, ins, wf)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	printWorkflow(ctx, pool, res.ID)

	// A worker process works the steps, each as soon as it may run.
	workers := river.NewWorkers()
	river.AddWorker(workers, &OrderStepWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		Workers: workers,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer client.Stop(ctx) //nolint:errcheck // the example ends

	waitFinished(ctx, pool, res.ID)
	printWorkflow(ctx, pool, res.ID)

	// Output:
	// order 1234: running
	//   charge available
	//   reserve available
	//   ship pending after [charge reserve]
	//   notify pending after [ship]
	// order 1234: completed
	//   charge completed
	//   reserve completed
	//   ship completed after [charge reserve]
	//   notify completed after [ship]
}

// printWorkflow prints workflow id's state and its steps'.
func printWorkflow(ctx context.Context, db workflow.DB, id string) {
	in, err := workflow.Get(ctx, db, id)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %s\n", in.Name, in.State)
	for _, s := range in.Steps {
		if len(s.DependsOn) == 0 {
			fmt.Printf("  %s %s\n", s.Name, s.State)
		} else {
			fmt.Printf("  %s %s after %v\n", s.Name, s.State, s.DependsOn)
		}
	}
}

// waitFinished waits, for at most ten seconds, until workflow id is no
// longer running.
func waitFinished(ctx context.Context, db workflow.DB, id string) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		in, err := workflow.Get(ctx, db, id)
		if err != nil {
			log.Fatal(err)
		}
		if in.State != "running" {
			return
		}
	}
	log.Fatalf("workflow %s still running after 10s", id)
}

// examplePool stands for the service's own pool: here, on this package's
// test database.
func examplePool() *pgxpool.Pool { return pgtest.ExamplePool() }
