package seal_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/seal"
)

// SendInvoiceArgs are the args of a job kind of the service.
type SendInvoiceArgs struct {
	InvoiceID int64 `json:"invoice_id"`
}

// Kind implements river.JobArgs.
func (SendInvoiceArgs) Kind() string { return "billing.send_invoice" }

// The inserting service seals what it inserts (Middleware); the worker
// refuses what nobody sealed (a Verifier, in its River client's middleware),
// such as a job written by a process without the keys. Check is the
// Verifier's decision, as the worker takes it before the kind's worker runs.
func ExampleNewVerifier() {
	ctx := context.Background()
	pool := examplePool()

	// In a deployment: seal.FromEnv(), the same FERRY_SEAL_KEYS everywhere.
	keys, err := seal.ParseKeys(seal.GenerateKey())
	if err != nil {
		log.Fatal(err)
	}

	// The service's client seals every job it inserts.
	sealing, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Middleware: []rivertype.Middleware{seal.Middleware(keys)},
	})
	if err != nil {
		log.Fatal(err)
	}
	sealed, err := sealing.Insert(ctx, SendInvoiceArgs{InvoiceID: 7}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, hasSeal := seal.Tag(sealed.Job.Tags)
	fmt.Println("sealed job has a seal:", hasSeal)

	// Anyone else who can write river_job.
	plain, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		log.Fatal(err)
	}
	planted, err := plain.Insert(ctx, SendInvoiceArgs{InvoiceID: 8}, nil)
	if err != nil {
		log.Fatal(err)
	}

	// The worker's side: river.Config{Middleware: []rivertype.Middleware{verifier}, …}.
	verifier, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys})
	if err != nil {
		log.Fatal(err)
	}
	if refusal := verifier.Check(sealed.Job); refusal == nil {
		fmt.Println("sealed job: runs")
	}
	if refusal := verifier.Check(planted.Job); refusal != nil {
		fmt.Println("planted job: refused,", refusal.Reason)
	}

	// Output:
	// sealed job has a seal: true
	// sealed job: runs
	// planted job: refused, missing
}

// examplePool stands for the service's own pool: here, on this package's
// test database.
func examplePool() *pgxpool.Pool { return pgtest.ExamplePool() }
