// Command worker runs ferry's job workers and migrates its schema. The app
// lives in ferrycli; see `worker --help`.
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
	code := ferrycli.Run(ctx, ferrycli.Worker(), os.Args)
	stop()
	os.Exit(code)
}
