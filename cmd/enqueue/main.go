// Command enqueue is the operator CLI: insert and inspect jobs. The app
// lives in internal/cli; see `enqueue --help`.
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
	code := cli.Run(ctx, cli.Enqueue(), os.Args)
	stop()
	os.Exit(code)
}
