package ferrycli

import (
	"cmp"
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/internal/limit"
)

// shownKeys is how many keys of a keyed limit the table lists (the
// busiest); --json lists them all.
const shownKeys = 10

func enqueueLimits() *cli.Command {
	return &cli.Command{
		Name:  "limits",
		Usage: "list the concurrency and rate limits with their use and the jobs waiting for them",
		Description: `Lists the limits of the workers' config files (limits:), as the workers
registered them (a limit no worker has marked seen for ten minutes is
gone). RUNNING is how many of a concurrency limit's slots are held: jobs
running, and slots handed to a waiting job about to start. TOKENS is how
much of a rate's burst is spent. WAITING is how many jobs wait for the
limit: snoozed, their attempt given back, until a slot frees or their
turn at the rate comes. A keyed limit (KEY, a field of the jobs' args)
lists its busiest keys below it.

Examples:
   enqueue limits
   enqueue limits --json`,
		Flags:  []cli.Flag{databaseURLFlag(), jsonFlag()},
		Action: runLimits,
	}
}

// limitJSON is a limit in --json's output.
type limitJSON struct {
	Name        string         `json:"name"`
	Kind        string         `json:"kind,omitempty"`
	Queue       string         `json:"queue,omitempty"`
	Key         string         `json:"key,omitempty"`
	Concurrency int            `json:"concurrency,omitempty"`
	Rate        string         `json:"rate,omitempty"`
	Burst       int            `json:"burst,omitempty"`
	Running     int            `json:"running"`
	Tokens      int            `json:"tokens"`
	Waiting     int            `json:"waiting"`
	SeenAt      time.Time      `json:"seen_at"`
	Keys        []limitKeyJSON `json:"keys"`
}

type limitKeyJSON struct {
	Key     string `json:"key"`
	Running int    `json:"running"`
	Tokens  int    `json:"tokens"`
	Waiting int    `json:"waiting"`
}

func runLimits(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("limits takes no arguments, got %q", c.Args().First())
	}
	var ls []limit.Status
	err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		ls, err = limit.List(ctx, pool)
		return err
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		js := make([]limitJSON, 0, len(ls))
		for _, l := range ls {
			j := limitJSON{
				Name: l.Name, Kind: l.Kind, Queue: l.Queue, Key: l.KeyField, Concurrency: l.Concurrency,
				Rate: l.Rate.String(), Burst: l.Rate.Burst,
				Running: l.Running, Tokens: l.Tokens, Waiting: l.Waiting, SeenAt: l.SeenAt,
				Keys: make([]limitKeyJSON, 0, len(l.Keys)),
			}
			for _, k := range l.Keys {
				j.Keys = append(j.Keys, limitKeyJSON(k))
			}
			js = append(js, j)
		}
		return out.JSON(js)
	}
	dash := func(n int) string {
		if n == 0 {
			return "-"
		}
		return strconv.Itoa(n)
	}
	header := []string{"NAME", "APPLIES TO", "KEY", "CONCURRENCY", "RATE", "RUNNING", "TOKENS", "WAITING"}
	var table [][]string
	for _, l := range ls {
		target := "kind " + l.Kind
		if l.Queue != "" {
			target = "queue " + l.Queue
		}
		rate := "-"
		if !l.Rate.IsZero() {
			rate = l.Rate.String() + " burst " + strconv.Itoa(l.Rate.Burst)
		}
		table = append(table, []string{l.Name, target, cmp.Or(l.KeyField, "-"), dash(l.Concurrency), rate,
			strconv.Itoa(l.Running), strconv.Itoa(l.Tokens), strconv.Itoa(l.Waiting)})
		if l.KeyField == "" {
			continue
		}
		for i, k := range l.Keys {
			if i == shownKeys {
				table = append(table, []string{"", "", "(" + strconv.Itoa(len(l.Keys)-shownKeys) + " more keys: --json)", "", "", "", "", ""})
				break
			}
			table = append(table, []string{"", "", "= " + strconv.Quote(k.Key), "", "",
				strconv.Itoa(k.Running), strconv.Itoa(k.Tokens), strconv.Itoa(k.Waiting)})
		}
	}
	return out.Table(header, table)
}
