// Command enqueue is the operator CLI: insert and inspect jobs. The app
// lives in ferrycli; see `enqueue --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferryq/ferry/ferrycli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ferrycli.Run(ctx, ferrycli.EnqueueApp(), os.Args)
	stop()
	os.Exit(code)
}
