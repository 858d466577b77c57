package ferrycli

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/jobs"
)

// deadBatch bounds the ids of one JobDeleteMany call (River's limit).
const deadBatch = 10_000

func enqueueDead() *cli.Command {
	selectFlags := func() []cli.Flag {
		return []cli.Flag{
			databaseURLFlag(),
			&cli.StringSliceFlag{Name: "kind", Usage: "every dead letter of this kind (repeatable)"},
			&cli.StringSliceFlag{Name: "queue", Usage: "every dead letter in this queue (repeatable)"},
			&cli.BoolFlag{Name: "all", Usage: "every dead letter"},
			&cli.BoolFlag{Name: "yes", Aliases: []string{"y"}, Usage: "do not ask to confirm a filter's matches (required for a filter when stdin is not a terminal)"},
			jsonFlag(),
		}
	}
	return &cli.Command{
		Name:  "dead",
		Usage: "list, retry or discard dead letters (jobs that failed for good)",
		Description: `A dead letter is a job that will not run again because it failed:

   discarded   its last attempt failed (attempt reached max_attempts), or its
               worker died under it FERRY_MAX_ORPHANED times
   cancelled   its worker cancelled it for a permanent failure (river.JobCancel:
               http.request answered 404, say), with the reason in its errors

A job cancelled by a person (enqueue jobs cancel, River UI, River's JobCancel
from Go) is not a dead letter: River marks it with cancel_attempted_at in its
metadata. Dead letters stay in river_job, with every attempt's error, until
River's job cleaner removes them (after 7 days by default).

retry and discard take job ids, or a filter: --kind and --queue (combined
with AND), or --all. Named ids are acted on at once. A filter's matches are
counted and, on a terminal, confirmed before anything is done unless --yes is
given; when stdin is not a terminal (scripts, CI), a filter needs --yes.

Examples:
   enqueue dead list --since 24h
   enqueue dead retry 1042 1043
   enqueue dead retry --kind http.request --queue web
   enqueue dead discard --all --yes`,
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list dead letters, newest first, with their state and last error (the reason)",
				Description: `Same filters as enqueue jobs list, without --state.

Examples:
   enqueue dead list
   enqueue dead list --kind http.request --since 24h
   enqueue dead list --queue reports --json`,
				Flags: jobListFlags(false),
				Action: func(c *cli.Context) error {
					return runJobsList(c, true)
				},
			},
			{
				Name:      "retry",
				Aliases:   []string{"requeue"},
				Usage:     "make dead letters available again, keeping their errors",
				ArgsUsage: "[ID…]",
				Description: `Each job goes back to available with River's JobRetry: its errors and attempt
count are kept (as history), and it gets one more attempt if it had used them
all. All matching jobs are retried in one transaction. requeue is the same
command.

Examples:
   enqueue dead retry 1042 1043
   enqueue dead retry --kind http.request
   enqueue dead retry --queue reports --yes --json
   enqueue dead retry --all --yes`,
				Flags:  selectFlags(),
				Action: func(c *cli.Context) error { return runDead(c, "retry", "retried") },
			},
			{
				Name:      "discard",
				Usage:     "delete dead letters for good",
				ArgsUsage: "[ID…]",
				Description: `Deletes the matching dead letters (River's JobDeleteMany, limited to them) in
one transaction.

Examples:
   enqueue dead discard 1042
   enqueue dead discard --kind app.report --yes
   enqueue dead discard --all --yes --json`,
				Flags:  selectFlags(),
				Action: func(c *cli.Context) error { return runDead(c, "discard", "discarded") },
			},
		},
	}
}

// deadResult is what dead retry and discard print.
type deadResult struct {
	Count   int            `json:"count"` // jobs retried or discarded
	IDs     []int64        `json:"ids"`
	Skipped []actionResult `json:"skipped"` // given ids that were not dead letters
}

func runDead(c *cli.Context, verb, done string) error {
	// Everything that can be refused without the database is refused first.
	var ids []int64
	kinds, queues, all := c.StringSlice("kind"), c.StringSlice("queue"), c.Bool("all")
	filtered := len(kinds) > 0 || len(queues) > 0
	switch {
	case c.NArg() > 0 && (filtered || all):
		return usageErrorf("give job ids or --kind/--queue/--all, not both")
	case c.NArg() > 0:
		var err error
		if ids, err = parseIDs(c, verb); err != nil {
			return err
		}
	case all && filtered:
		return usageErrorf("--all with --kind or --queue: give one or the other")
	case !all && !filtered:
		return usageErrorf("%s which dead letters? give job ids, --kind, --queue or --all", verb)
	}
	for _, q := range queues {
		if err := jobs.ValidateQueueName(q); err != nil {
			return usageErrorf("--queue: %v", err)
		}
	}
	// Job ids named one by one are the operator's choice already: only a
	// filter, whose matches the operator has not seen, is confirmed.
	yes := c.Bool("yes") || ids != nil
	if !yes && !isTerminal(c.App.Reader) {
		return usageErrorf("refusing without --yes when not on a terminal")
	}

	res := deadResult{IDs: []int64{}, Skipped: []actionResult{}}
	aborted := false
	err := withClient(c, func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx]) error {
		var err error
		targets := ids
		if ids != nil {
			targets, res.Skipped, err = deadOf(ctx, pool, ids)
		} else {
			targets, err = deadMatching(ctx, pool, kinds, queues)
		}
		if err != nil || len(targets) == 0 {
			return err
		}
		if !yes {
			ok, err := confirm(c, fmt.Sprintf("%s %d %s? [y/N] ", verb, len(targets), plural(len(targets), "dead letter", "dead letters")))
			if err != nil || !ok {
				aborted = true
				return err
			}
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// Only jobs still dead letters now: a job retried or cleaned
			// since the count is left alone.
			rows, err := tx.Query(ctx, sqlLockDead, targets)
			if err != nil {
				return fmt.Errorf("lock dead letters: %w", err)
			}
			locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return fmt.Errorf("lock dead letters: %w", err)
			}
			if verb == "retry" {
				for _, id := range locked {
					if _, err := client.JobRetryTx(ctx, tx, id); err != nil {
						return fmt.Errorf("retry job %d: %w", id, jobs.AsQueueFull(err))
					}
				}
				res.IDs = locked
			} else {
				for chunk := range slices.Chunk(locked, deadBatch) {
					del, err := client.JobDeleteManyTx(ctx, tx, river.NewJobDeleteManyParams().
						IDs(chunk...).States(rivertype.JobStateDiscarded, rivertype.JobStateCancelled).First(deadBatch))
					if err != nil {
						return fmt.Errorf("delete dead letters: %w", err)
					}
					for _, j := range del.Jobs {
						res.IDs = append(res.IDs, j.ID)
					}
				}
				slices.Sort(res.IDs)
			}
			res.Count = len(res.IDs)
			for _, id := range targets {
				if _, found := slices.BinarySearch(res.IDs, id); !found {
					res.Skipped = append(res.Skipped, actionResult{ID: id, Error: "no longer a dead letter"})
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	if aborted {
		return fmt.Errorf("not confirmed: nothing %s", done)
	}
	out := outputFrom(c)
	if out.json {
		err = out.JSON(res)
	} else {
		_, err = fmt.Fprintf(out.w, "%s %d %s\n", done, res.Count, plural(res.Count, "dead letter", "dead letters"))
		for _, s := range res.Skipped {
			if err == nil {
				_, err = fmt.Fprintf(out.w, "job %d: %s\n", s.ID, s.Error)
			}
		}
	}
	if err != nil {
		return err
	}
	if len(res.Skipped) > 0 {
		return fmt.Errorf("%d of %d jobs not %s", len(res.Skipped), res.Count+len(res.Skipped), done)
	}
	return nil
}

// deadOf splits ids into the dead letters and the others (not found, in
// another state, or cancelled by a person).
func deadOf(ctx context.Context, pool *pgxpool.Pool, ids []int64) (dead []int64, skipped []actionResult, err error) {
	rows, err := pool.Query(ctx, sqlDeadStates, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read job states: %w", err)
	}
	type jobState struct {
		state string
		dead  bool
	}
	states := map[int64]jobState{}
	var (
		id    int64
		state jobState
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &state.state, &state.dead}, func() error {
		states[id] = state
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read job states: %w", err)
	}
	skipped = []actionResult{}
	for _, id := range ids {
		switch st, ok := states[id]; {
		case !ok:
			skipped = append(skipped, actionResult{ID: id, Error: "not found"})
		case st.dead:
			dead = append(dead, id)
		case st.state == string(rivertype.JobStateCancelled):
			skipped = append(skipped, actionResult{ID: id, State: st.state, Error: "cancelled by a person, not a dead letter"})
		default:
			skipped = append(skipped, actionResult{ID: id, State: st.state, Error: st.state + ", not a dead letter"})
		}
	}
	return dead, skipped, nil
}

func deadMatching(ctx context.Context, pool *pgxpool.Pool, kinds, queues []string) ([]int64, error) {
	if kinds == nil {
		kinds = []string{}
	}
	if queues == nil {
		queues = []string{}
	}
	rows, err := pool.Query(ctx, sqlDeadIDs, kinds, queues)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return ids, nil
}

// confirm asks question on stderr and reads the answer from stdin.
func confirm(c *cli.Context, question string) (bool, error) {
	fmt.Fprint(c.App.ErrWriter, question)
	line, err := bufio.NewReader(c.App.Reader).ReadString('\n')
	if err != nil && line == "" {
		fmt.Fprintln(c.App.ErrWriter)
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
