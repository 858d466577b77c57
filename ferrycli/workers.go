package ferrycli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/internal/liveness"
)

func enqueueWorkers() *cli.Command {
	return &cli.Command{
		Name:  "workers",
		Usage: "list the live workers, and those dead or stopped lately with what was rescued from them",
		Description: `Reads ferry_worker, pg_locks (in this database only) and the running jobs.
A worker is alive while its liveness session holds its lock, whatever its
last heartbeat says. States:

   alive     its session holds the lock; RUNNING counts the jobs whose latest
             attempt is its own
   lost      its lock is free, and the leader has not declared it dead yet
             (within a second, or no leader): its running jobs wait for that
   dead      the leader declared it dead and took back RESCUED running jobs,
             at the time in ENDED
   stopped   it stopped gracefully at ENDED

Alive and lost workers are always listed; dead and stopped ones when they
ended within --since.

Examples:
   enqueue workers
   enqueue workers --since 24h
   enqueue workers --json`,
		Flags: []cli.Flag{
			databaseURLFlag(),
			durationFlag("since", "also list the workers that died or stopped within this long", time.Hour, ""),
			jsonFlag(),
		},
		Action: runWorkers,
	}
}

func runWorkers(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("workers takes no arguments, got %q", c.Args().First())
	}
	since := c.Duration("since")
	if since <= 0 {
		return usageErrorf("--since %s: must be a positive duration like 1h", since)
	}
	var ws []liveness.WorkerInfo
	err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		ws, err = liveness.List(ctx, pool, since)
		return err
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		if ws == nil {
			ws = []liveness.WorkerInfo{}
		}
		return out.JSON(ws)
	}
	if len(ws) == 0 {
		_, err := fmt.Fprintf(out.w, "no worker alive, and none dead or stopped in the last %s\n", since)
		return err
	}
	table := make([][]string, 0, len(ws))
	for _, w := range ws {
		ended, rescued := "-", "-"
		switch w.State {
		case liveness.StateDead:
			ended, rescued = fmtTimePtr(w.DeadAt), strconv.Itoa(w.RescuedJobs)
		case liveness.StateStopped:
			ended = fmtTimePtr(w.StoppedAt)
			if w.DeadAt != nil {
				rescued = strconv.Itoa(w.RescuedJobs)
			}
		}
		table = append(table, []string{w.ClientID, w.Hostname, strconv.Itoa(w.PID), w.State,
			fmtTime(w.StartedAt), fmtTime(w.LastSeenAt), strconv.Itoa(w.RunningJobs), ended, rescued})
	}
	return out.Table([]string{"CLIENT ID", "HOST", "PID", "STATE", "SINCE", "LAST SEEN", "RUNNING", "ENDED", "RESCUED"}, table)
}
