// Command worker runs ferry's job workers and migrates its schema. The app
// lives in internal/cli; see `worker --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/ferryq/ferry/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, cli.Worker(), os.Args)
	stop()
	os.Exit(code)
}
