package broadcast_test

import (
	"context"
	"fmt"

	"github.com/ferryq/ferry/broadcast"
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
