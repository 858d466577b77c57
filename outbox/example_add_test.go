package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/outbox"
)

// A service writes the message in the transaction that places the order:
// it exists if and only if the order does. The order id as dedup key makes
// a retried request harmless: the second Add is refused, and the
// transaction goes on.
func ExampleAdd() {
	ctx := context.Background()
	pool := examplePool()

	placeOrder := func(orderID int) (int64, error) {
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// INSERT INTO orders … in tx, then:
			var err error
			id, err = outbox.Add(ctx, tx, "order.placed", map[string]any{"order_id": orderID},
				outbox.WithDedupKey(fmt.Sprintf("order-%d", orderID)))
			if errors.Is(err, outbox.ErrDuplicate) {
				return nil // already placed: commit the rest
			}
			return err
		})
		return id, err
	}

	id, err := placeOrder(1234)
	if err != nil {
		log.Fatal(err)
	}
	again, err := placeOrder(1234)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("added:", id > 0, "added again:", again > 0)

	// The relay of a running worker turns the message into one delivery
	// job per route; until then it is pending.
	var topic, payload, status string
	if err := pool.QueryRow(ctx, "SELECT topic, payload::text, status FROM ferry_outbox WHERE id = $1", id).
		Scan(&topic, &payload, &status); err != nil {
		log.Fatal(err)
	}
	fmt.Println(topic, payload, status)

	// Bad input is refused before anything is written.
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Add(ctx, tx, "order placed", map[string]any{"order_id": 1235})
		return err
	})
	fmt.Println(errors.Is(err, outbox.ErrInvalidTopic))

	// Output:
	// added: true added again: false
	// order.placed {"order_id": 1234} pending
	// true
}

// examplePool stands for the service's own pool: here, on this package's
// test database.
func examplePool() *pgxpool.Pool { return pgtest.ExamplePool() }
