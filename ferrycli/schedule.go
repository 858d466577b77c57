package ferrycli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/periodic"
)

func enqueueSchedule() *cli.Command {
	return &cli.Command{
		Name:  "schedule",
		Usage: "list schedules, or check when an expression fires",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the schedules the leader runs, with next run and last tick",
				Description: `Reads ferry_schedule (kept current by the leader) and the state of each
schedule's last job.

Examples:
   enqueue schedule list
   enqueue schedule list --json`,
				Flags: []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					if c.NArg() > 0 {
						return usageErrorf("list takes no arguments, got %q", c.Args().First())
					}
					var rows []periodic.Row
					err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
						rows, err = periodic.List(ctx, pool)
						return err
					})
					if err != nil {
						return err
					}
					out := outputFrom(c)
					if out.json {
						if rows == nil {
							rows = []periodic.Row{}
						}
						return out.JSON(rows)
					}
					table := make([][]string, 0, len(rows))
					for _, r := range rows {
						last := "-"
						if r.LastTickAt != nil {
							last = fmtTime(*r.LastTickAt) + " " + deref(r.LastStatus)
						}
						job := "-"
						if r.LastJobID != nil {
							job = fmt.Sprintf("%d %s", *r.LastJobID, derefOr(r.LastJobState, "(cleaned)"))
						}
						next := "-"
						if r.NextRunAt != nil {
							next = fmtTime(*r.NextRunAt)
						}
						table = append(table, []string{r.ID, r.Name, r.Trigger, r.Zone, next, last, job})
					}
					return out.Table([]string{"ID", "NAME", "TRIGGER", "ZONE", "NEXT RUN", "LAST TICK", "LAST JOB"}, table)
				},
			},
			{
				Name:      "next",
				Usage:     "print the next fire times of a cron expression or an interval",
				ArgsUsage: "EXPR",
				Description: `EXPR is a five-field cron expression ("0 6 * * 1-5", "@daily") or an interval
("every 15m", or just "15m"). Times are printed in RFC 3339 with the zone's
offset, so DST rules can be checked before a deploy.

Examples:
   enqueue schedule next "30 2 * * *" --tz Europe/Madrid --from 2027-03-27T00:00:00Z --count 3
   enqueue schedule next "every 5m" --count 4 --json`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "tz", Usage: "IANA time zone of a cron expression (default UTC)"},
					&cli.StringFlag{Name: "from", Usage: "start after this time (RFC 3339; default now)"},
					&cli.IntFlag{Name: "count", Value: 5, Usage: "how many fire times (1 to 1000)"},
					jsonFlag(),
				},
				Action: runScheduleNext,
			},
		},
	}
}

func runScheduleNext(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageErrorf("next takes exactly one EXPR argument (quote it), got %d", c.NArg())
	}
	expr := strings.TrimSpace(c.Args().First())
	var (
		tr  periodic.Trigger
		err error
	)
	if d, ok := strings.CutPrefix(expr, "every "); ok || looksLikeDuration(expr) {
		if c.String("tz") != "" {
			return usageErrorf("--tz: only for cron expressions (intervals are aligned to UTC)")
		}
		if !ok {
			d = expr
		}
		tr, err = periodic.ParseEvery(strings.TrimSpace(d))
	} else {
		tr, err = periodic.ParseCron(expr, c.String("tz"))
	}
	if err != nil {
		return &UsageError{Err: err}
	}
	from := time.Now()
	if f := c.String("from"); f != "" {
		if from, err = time.Parse(time.RFC3339, f); err != nil {
			return usageErrorf("--from %q: not an RFC 3339 time like 2027-03-27T00:00:00Z", f)
		}
	}
	n := c.Int("count")
	if n < 1 || n > 1000 {
		return usageErrorf("--count %d: must be 1 to 1000", n)
	}
	loc, err := time.LoadLocation(tr.Zone())
	if err != nil {
		return &UsageError{Err: err}
	}
	var times []string
	for t := tr.Next(from); !t.IsZero() && len(times) < n; t = tr.Next(t) {
		times = append(times, t.In(loc).Format(time.RFC3339))
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(map[string]any{"trigger": tr.String(), "zone": tr.Zone(), "next": times})
	}
	for _, t := range times {
		fmt.Fprintln(out.w, t)
	}
	return nil
}

func looksLikeDuration(s string) bool {
	_, err := time.ParseDuration(s)
	return err == nil
}

func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }

func deref(s *string) string { return derefOr(s, "") }

func derefOr(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}
