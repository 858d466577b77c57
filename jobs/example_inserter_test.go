package jobs_test

import (
	"context"
	"fmt"
	"log"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// A service inserts a job in its own transaction, with a unique key so that
// a second insert of the same work returns the job already there. The job
// exists if and only if the transaction commits; this example rolls back, so
// it leaves nothing behind.
func ExampleInserter_InsertTx() {
	ctx := context.Background()
	pool := examplePool()

	ins, err := jobs.NewInserter(pool)
	if err != nil {
		log.Fatal(err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck

	args := jobs.HTTPRequestArgs{Method: "POST", URL: "https://app.example/cache/warm"}
	opts := jobs.WithUniqueKey(&river.InsertOpts{Queue: "example"}, "warm-2024-06-01")
	first, err := ins.InsertTx(ctx, tx, args, opts)
	if err != nil {
		log.Fatal(err)
	}
	second, err := ins.InsertTx(ctx, tx, args, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("first:", first.Job.Kind, first.Job.State, "duplicate:", first.UniqueSkippedAsDuplicate)
	fmt.Println("second is the first:", second.Job.ID == first.Job.ID, "duplicate:", second.UniqueSkippedAsDuplicate)

	// A bad request is refused before it reaches the database.
	_, err = ins.InsertTx(ctx, tx, jobs.HTTPRequestArgs{URL: "/cache/warm"}, nil)
	fmt.Println(err)

	if err := tx.Rollback(ctx); err != nil {
		log.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE id = $1", first.Job.ID).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("jobs after rollback:", n)

	// Output:
	// first: http.request available duplicate: false
	// second is the first: true duplicate: true
	// http.request: url "/cache/warm" is not an absolute http(s) URL
	// jobs after rollback: 0
}
