package ferrycli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
)

func enqueueOutbox() *cli.Command {
	return &cli.Command{
		Name:  "outbox",
		Usage: "write, inspect and reset outbox messages",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "write one message (as a service would, in its own transaction)",
				ArgsUsage: "TOPIC",
				Description: `Examples:
   enqueue outbox add order.placed --payload '{"order_id":42}'
   enqueue outbox add order.placed --payload @order.json --dedup-key order-42`,
				Flags: []cli.Flag{
					databaseURLFlag(),
					&cli.StringFlag{Name: "payload", Value: "{}", Usage: "JSON payload: inline, @file, or - for stdin"},
					&cli.StringFlag{Name: "dedup-key", Usage: "unique per topic: a second message with this key is refused"},
					jsonFlag(),
				},
				Action: runOutboxAdd,
			},
			{
				Name:  "stats",
				Usage: "count messages and deliveries by topic, route and status",
				Flags: []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					var stats []outbox.Stat
					err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
						stats, err = outbox.Stats(ctx, pool)
						return err
					})
					if err != nil {
						return err
					}
					out := outputFrom(c)
					if out.json {
						if stats == nil {
							stats = []outbox.Stat{}
						}
						return out.JSON(stats)
					}
					rows := make([][]string, 0, len(stats))
					for _, s := range stats {
						route := s.Route
						if route == "" {
							route = "(message)"
						}
						rows = append(rows, []string{s.Topic, route, s.Status, strconv.FormatInt(s.Count, 10)})
					}
					return out.Table([]string{"TOPIC", "ROUTE", "STATUS", "COUNT"}, rows)
				},
			},
			{
				Name:  "list",
				Usage: "list messages with their deliveries, newest first",
				Description: `Examples:
   enqueue outbox list --status stuck
   enqueue outbox list --topic order.placed --limit 20 --json`,
				Flags: []cli.Flag{
					databaseURLFlag(),
					&cli.StringFlag{Name: "status", Usage: "pending, relayed, delivered, stuck, or waiting (for a route)"},
					&cli.StringFlag{Name: "topic", Usage: "only this topic"},
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many rows (1 to 10000)"},
					jsonFlag(),
				},
				Action: runOutboxList,
			},
			{
				Name:      "reset",
				Usage:     "put stuck messages back: their stuck deliveries are relayed again",
				ArgsUsage: "MESSAGE_ID…",
				Description: `Each stuck delivery of the messages goes back to pending with a new delivery job
(attempts are kept, as history); a message stuck for want of a route goes back
to the relay, which routes it again.

Example:
   enqueue outbox reset 1042 1043`,
				Flags: []cli.Flag{
					databaseURLFlag(),
					&cli.IntFlag{Name: "max-attempts", Value: outbox.DefaultMaxAttempts, Usage: "attempts of the new delivery jobs", EnvVars: []string{"FERRY_OUTBOX_MAX_ATTEMPTS"}},
					jsonFlag(),
				},
				Action: runOutboxReset,
			},
		},
	}
}

func runOutboxAdd(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageErrorf("add takes exactly one TOPIC argument, got %d", c.NArg())
	}
	topic := c.Args().First()
	payload, err := readDocument("payload", c.String("payload"), c.App.Reader, outbox.MaxPayloadBytes)
	if err != nil {
		return err
	}
	var opts []outbox.AddOption
	if c.IsSet("dedup-key") {
		opts = append(opts, outbox.WithDedupKey(c.String("dedup-key")))
	}
	var id int64
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, err = outbox.Add(ctx, tx, topic, []byte(payload), opts...)
			return err
		})
	})
	for _, bad := range []error{outbox.ErrInvalidTopic, outbox.ErrInvalidPayload, outbox.ErrPayloadTooLarge, outbox.ErrInvalidDedupKey, outbox.ErrDuplicate} {
		if errors.Is(err, bad) {
			return &UsageError{Err: err}
		}
	}
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(map[string]any{"id": id, "topic": topic})
	}
	_, err = fmt.Fprintln(out.w, id)
	return err
}

func runOutboxList(c *cli.Context) error {
	f := outbox.ListFilter{Status: c.String("status"), Topic: c.String("topic"), Limit: c.Int("limit")}
	switch f.Status {
	case "", "pending", "relayed", "delivered", "stuck", "waiting":
	default:
		return usageErrorf("--status %q: want pending, relayed, delivered, stuck or waiting", f.Status)
	}
	if f.Limit < 1 || f.Limit > 10000 {
		return usageErrorf("--limit %d: must be 1 to 10000", f.Limit)
	}
	var list []outbox.Delivery
	err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		list, err = outbox.List(ctx, pool, f)
		return err
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		if list == nil {
			list = []outbox.Delivery{}
		}
		return out.JSON(list)
	}
	rows := make([][]string, 0, len(list))
	for _, d := range list {
		attempts := "-"
		if d.Attempts != nil {
			attempts = strconv.Itoa(*d.Attempts)
		}
		rows = append(rows, []string{strconv.FormatInt(d.MessageID, 10), d.Topic, derefOr(d.Route, "-"), derefOr(d.Status, d.MessageStatus),
			attempts, truncate(derefOr(d.LastError, ""), 80), fmtTime(d.CreatedAt)})
	}
	return out.Table([]string{"ID", "TOPIC", "ROUTE", "STATUS", "ATTEMPTS", "LAST ERROR", "CREATED"}, rows)
}

func runOutboxReset(c *cli.Context) error {
	if c.NArg() == 0 {
		return usageErrorf("reset takes one or more MESSAGE_ID arguments")
	}
	ids := make([]int64, 0, c.NArg())
	for _, a := range c.Args().Slice() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return usageErrorf("%q is not a message id", a)
		}
		ids = append(ids, id)
	}
	var deliveries, messages int
	err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		ins, err := jobs.NewInserter(pool)
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			deliveries, messages, err = outbox.Reset(ctx, tx, ins.Client(), ids, c.Int("max-attempts"))
			return err
		})
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(map[string]int{"deliveries": deliveries, "messages": messages})
	}
	_, err = fmt.Fprintf(out.w, "reset %d stuck deliveries of %d messages\n", deliveries, messages)
	return err
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
