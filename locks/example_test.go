package locks_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/locks"
)

// Two replicas run the nightly report; the lock lets one of them do it.
// The holder's writes are fenced by its token, so a holder that lost the
// lock (paused past its expiry) cannot write after the next one took it.
func ExampleClient_Acquire() {
	ctx := context.Background()
	pool := examplePool()

	replicaA := locks.New(pool, locks.Config{Holder: "replica-a"})
	replicaB := locks.New(pool, locks.Config{Holder: "replica-b"})
	opts := locks.Options{TTL: time.Minute}

	l, err := replicaA.Acquire(ctx, "nightly-report", opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Name(), "held:", l.Held(), "token:", l.Token())

	// Replica B tries once (Wait 0) and is told who holds it.
	_, err = replicaB.Acquire(ctx, "nightly-report", opts)
	var held *locks.HeldError
	if errors.As(err, &held) {
		fmt.Println("replica-b: not acquired, held by", held.Holder.Holder)
	}

	// The report's writes, in a transaction fenced by the lock.
	err = pgx.BeginFunc(l.Context(), pool, func(tx pgx.Tx) error {
		if err := l.Fence(ctx, tx); err != nil {
			return err
		}
		// INSERT INTO reports … in tx
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Release(context.WithoutCancel(ctx)); err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Name(), "held:", l.Held())

	// The next holder gets the next token.
	l, err = replicaB.Acquire(ctx, "nightly-report", opts)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(context.WithoutCancel(ctx)) //nolint:errcheck // the example ends
	fmt.Println("replica-b: token:", l.Token())

	// Output:
	// nightly-report held: true token: 1
	// replica-b: not acquired, held by replica-a
	// nightly-report held: false
	// replica-b: token: 2
}

// examplePool stands for the service's own pool: here, on this package's
// test database.
func examplePool() *pgxpool.Pool { return pgtest.ExamplePool() }
