// Command worker runs ferry's job workers and migrates its schema. The app
// lives in package ferrycli, which also builds worker binaries with job
// kinds of their own; see `worker --help`.
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
	code := ferrycli.Run(ctx, ferrycli.WorkerApp(ferrycli.WorkerOptions{}), os.Args)
	stop()
	os.Exit(code)
}
