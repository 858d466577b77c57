package ferrycli

import (
	"context"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/jobs"
)

func enqueueQueues() *cli.Command {
	return &cli.Command{
		Name:  "queues",
		Usage: "list the queues with their jobs by state, their bound and their workers",
		Description: `Lists every queue that has jobs waiting or running, a bound, or a worker.
LENGTH is what the bound limits: the jobs available, scheduled, retryable,
pending and running. MAX LENGTH is the bound ("-": none); a queue at its
bound refuses inserts (enqueue job and bulk exit 3, as do jobs retry and
dead retry into a full queue). WORKERS is the worker
count that the last worker started with the queue recorded.

Examples:
   enqueue queues
   enqueue queues --json`,
		Flags:  []cli.Flag{databaseURLFlag(), jsonFlag()},
		Action: runQueues,
	}
}

func runQueues(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("queues takes no arguments, got %q", c.Args().First())
	}
	var qs []jobs.QueueInfo
	err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		qs, err = jobs.ListQueues(ctx, pool)
		return err
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		if qs == nil {
			qs = []jobs.QueueInfo{}
		}
		return out.JSON(qs)
	}
	header := []string{"QUEUE"}
	for _, s := range jobs.CountedStates {
		header = append(header, strings.ToUpper(s))
	}
	header = append(header, "LENGTH", "MAX LENGTH", "WORKERS")
	table := make([][]string, 0, len(qs))
	for _, q := range qs {
		row := []string{q.Name}
		for _, s := range jobs.CountedStates {
			row = append(row, strconv.FormatInt(q.Counts[s], 10))
		}
		maxLength, workers := "-", "-"
		if q.MaxLength != nil {
			maxLength = strconv.FormatInt(*q.MaxLength, 10)
		}
		if q.Workers != nil {
			workers = strconv.Itoa(*q.Workers)
		}
		table = append(table, append(row, strconv.FormatInt(q.Length, 10), maxLength, workers))
	}
	return out.Table(header, table)
}
