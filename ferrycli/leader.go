package ferrycli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/election"
)

func enqueueLeader() *cli.Command {
	return &cli.Command{
		Name:  "leader",
		Usage: "show which process holds the leader lock",
		Description: `Reads pg_locks (in this database only), pg_stat_activity and ferry_leader_term.
Exit code 0 when a process holds the lock; 1 when none does, with one line
saying so on stderr (and, with --json, {"leader": null} on stdout).

Examples:
   enqueue leader
   enqueue leader --json`,
		Flags: []cli.Flag{databaseURLFlag(), electionKeyFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("leader takes no arguments, got %q", c.Args().First())
			}
			key, err := electionKey(c)
			if err != nil {
				return err
			}
			var h *election.Holder
			err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
				h, err = election.CurrentHolder(ctx, pool, key)
				return err
			})
			if err != nil {
				return err
			}
			out := outputFrom(c)
			if h == nil {
				if out.json {
					if err := out.JSON(map[string]any{"leader": nil}); err != nil {
						return err
					}
				}
				return fmt.Errorf("no process holds the leader lock (key %d)", key)
			}
			if out.json {
				return out.JSON(map[string]any{"leader": h})
			}
			dash := func(p any) string {
				switch v := p.(type) {
				case *int64:
					if v != nil {
						return strconv.FormatInt(*v, 10)
					}
				case *int:
					if v != nil {
						return strconv.Itoa(*v)
					}
				case *time.Time:
					if v != nil {
						return v.UTC().Format(time.RFC3339) + " (" + time.Since(*v).Round(time.Second).String() + " ago)"
					}
				}
				return "-"
			}
			return out.Table([]string{"FIELD", "VALUE"}, [][]string{
				{"term", dash(h.Term)},
				{"application_name", h.ApplicationName},
				{"hostname", h.Hostname},
				{"pid", dash(h.PID)},
				{"backend_pid", strconv.Itoa(h.BackendPID)},
				{"client_addr", h.ClientAddr},
				{"session_state", h.SessionState},
				{"since", dash(h.AcquiredAt)},
				{"runnables_started", dash(h.StartedAt)},
			})
		},
	}
}
