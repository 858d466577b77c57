package broadcast_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

// Without a Pool a Broker is an in-process bus with the same API; with one,
// the same code reaches every process on the database.
func Example() {
	ctx := context.Background()
	b, err := broadcast.New(broadcast.Config{})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	sub, err := b.Subscribe(ctx, "board:42")
	if err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "board:42", map[string]any{"card": 7, "moved_to": "done"}); err != nil {
		panic(err)
	}
	ev, err := sub.Next(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(ev.Channel, ev.Gap, string(ev.Data))
	// Output: board:42 false {"card":7,"moved_to":"done"}
}

// A message published in a transaction is delivered to every process's
// subscribers when, and only if, the transaction commits. Here two Brokers
// stand for two processes on one database.
func ExampleBroker_PublishTx() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool := examplePool()

	// The process that shows the board.
	viewer, err := broadcast.New(broadcast.Config{Pool: pool})
	if err != nil {
		log.Fatal(err)
	}
	defer viewer.Close()
	sub, err := viewer.Subscribe(ctx, "board:42")
	if err != nil {
		log.Fatal(err)
	}

	// The process that moves cards, in the transactions that move them.
	editor, err := broadcast.New(broadcast.Config{Pool: pool})
	if err != nil {
		log.Fatal(err)
	}
	defer editor.Close()
	move := func(card int, commit bool) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
		// UPDATE cards … in tx, then:
		if err := editor.PublishTx(ctx, tx, "board:42", map[string]any{"card": card, "moved_to": "done"}); err != nil {
			return err
		}
		if !commit {
			return tx.Rollback(ctx)
		}
		return tx.Commit(ctx)
	}
	if err := move(6, false); err != nil { // rolled back: never sent
		log.Fatal(err)
	}
	if err := move(7, true); err != nil {
		log.Fatal(err)
	}

	ev, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ev.Channel, ev.Gap, string(ev.Data))
	// Output: board:42 false {"card":7,"moved_to":"done"}
}

// examplePool stands for the service's own pool: here, on this package's
// test database.
func examplePool() *pgxpool.Pool { return pgtest.ExamplePool() }
