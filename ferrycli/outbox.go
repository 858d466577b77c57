package ferrycli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
				Description: `Prints the message's id. With --dedup-key, a message of the topic that already
has the key is the answer: its id is printed with a line saying nothing was
written (in JSON, "duplicate": true), and the exit code is 0, as for
enqueue job --unique-key.

Examples:
   enqueue outbox add order.placed --payload '{"order_id":42}'
   enqueue outbox add order.placed --payload @order.json --dedup-key order-42`,
				Flags: []cli.Flag{
					databaseURLFlag(),
					&cli.StringFlag{Name: "payload", Value: "{}", Usage: "JSON payload: inline, @file, or - for stdin"},
					&cli.StringFlag{Name: "dedup-key", Usage: "unique per topic: a second message with this key writes nothing and returns the first one's id"},
					&cli.StringFlag{Name: "ordering-key", Usage: "deliver after the earlier messages of the topic with this key, one at a time, in order"},
					jsonFlag(),
				},
				Action: runOutboxAdd,
			},
			{
				Name:  "stats",
				Usage: "count messages and deliveries by topic, route and status",
				Flags: []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action: func(c *cli.Context) error {
					stats, out, printed, err := readList(c, func(ctx context.Context, pool *pgxpool.Pool) ([]outbox.Stat, error) { return outbox.Stats(ctx, pool) })
					if err != nil || printed {
						return err
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
					&cli.StringFlag{Name: "status", Usage: "pending, relayed, delivered, stuck, waiting (for a route), or blocked (ordered deliveries behind a stuck one)"},
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
to the relay, which routes it again. Each message is reported with what was
done to it; a message with nothing stuck is left as it is. The exit code is 1
if any id is not found (the others are reset).

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
	if c.IsSet("ordering-key") {
		opts = append(opts, outbox.WithOrderingKey(c.String("ordering-key")))
	}
	var (
		id        int64
		status    string
		duplicate bool
	)
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, err = outbox.Add(ctx, tx, topic, []byte(payload), opts...)
			if errors.Is(err, outbox.ErrDuplicate) {
				// As job --unique-key: the message already written is the
				// answer (Add leaves the transaction usable).
				duplicate = true
				err = tx.QueryRow(ctx, sqlOutboxByDedupKey, topic, c.String("dedup-key")).Scan(&id, &status)
				if err != nil {
					return fmt.Errorf("read the message with dedup key %q: %w", c.String("dedup-key"), err)
				}
			}
			return err
		})
	})
	for _, bad := range []error{outbox.ErrInvalidTopic, outbox.ErrInvalidPayload, outbox.ErrPayloadTooLarge, outbox.ErrInvalidDedupKey, outbox.ErrInvalidOrderingKey} {
		if errors.Is(err, bad) {
			return &UsageError{Err: err}
		}
	}
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(map[string]any{"id": id, "topic": topic, "duplicate": duplicate})
	}
	if duplicate {
		_, err = fmt.Fprintf(out.w, "dedup key matched existing message %d (%s, %s); nothing written\n", id, topic, status)
		return err
	}
	_, err = fmt.Fprintln(out.w, id)
	return err
}

// sqlOutboxByDedupKey reads the message of a topic with a dedup key.
const sqlOutboxByDedupKey = `SELECT id, status FROM ferry_outbox WHERE topic = $1 AND dedup_key = $2`

func runOutboxList(c *cli.Context) error {
	f := outbox.ListFilter{Status: c.String("status"), Topic: c.String("topic"), Limit: c.Int("limit")}
	switch f.Status {
	case "", "pending", "relayed", "delivered", "stuck", "waiting", outbox.StatusBlocked:
	default:
		return usageErrorf("--status %q: want pending, relayed, delivered, stuck, waiting or blocked", f.Status)
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
		status := cmp.Or(d.Wait, derefOr(d.Status, d.MessageStatus))
		rows = append(rows, []string{strconv.FormatInt(d.MessageID, 10), d.Topic, derefOr(d.Route, "-"), status, derefOr(d.OrderingKey, "-"),
			attempts, truncate(derefOr(d.LastError, ""), 80), fmtTime(d.CreatedAt)})
	}
	return out.Table([]string{"ID", "TOPIC", "ROUTE", "STATUS", "KEY", "ATTEMPTS", "LAST ERROR", "CREATED"}, rows)
}

// sqlOutboxStuck reads, before a reset and locking them, the given
// messages' status and how many of their deliveries are stuck.
const sqlOutboxStuck = `SELECT o.id, o.status,
		(SELECT count(*) FROM ferry_outbox_delivery d WHERE d.message_id = o.id AND d.status = 'stuck')::int
	FROM ferry_outbox o WHERE o.id = any($1::bigint[]) FOR UPDATE OF o`

// resetResult is what outbox reset did to one message.
type resetResult struct {
	ID     int64  `json:"id"`
	OK     bool   `json:"ok"`               // found (whether or not anything was stuck)
	Status string `json:"status,omitempty"` // the message's status before the reset
	// StuckDeliveries is how many of its deliveries were stuck, and so
	// went back to pending with a new delivery job.
	StuckDeliveries int    `json:"stuck_deliveries"`
	Result          string `json:"result"`
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
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	var (
		deliveries, messages int
		results              []resetResult
	)
	err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		ins, err := jobs.NewInserter(pool)
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			if results, err = stuckOf(ctx, tx, ids); err != nil {
				return err
			}
			deliveries, messages, err = outbox.Reset(ctx, tx, ins.Client(), ids, c.Int("max-attempts"))
			return err
		})
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		err = out.JSON(map[string]any{"deliveries": deliveries, "messages": messages, "results": results})
	} else {
		for _, r := range results {
			if err == nil {
				_, err = fmt.Fprintf(out.w, "message %d: %s\n", r.ID, r.Result)
			}
		}
	}
	if err != nil {
		return err
	}
	missing := 0
	for _, r := range results {
		if !r.OK {
			missing++
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d of %d messages not found", missing, len(results))
	}
	return nil
}

// stuckOf reads what a reset of ids will do to each, in ids' order.
func stuckOf(ctx context.Context, tx pgx.Tx, ids []int64) ([]resetResult, error) {
	rows, err := tx.Query(ctx, sqlOutboxStuck, ids)
	if err != nil {
		return nil, fmt.Errorf("read the messages: %w", err)
	}
	found := map[int64]resetResult{}
	var r resetResult
	_, err = pgx.ForEachRow(rows, []any{&r.ID, &r.Status, &r.StuckDeliveries}, func() error {
		found[r.ID] = r
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the messages: %w", err)
	}
	results := make([]resetResult, 0, len(ids))
	for _, id := range ids {
		r, ok := found[id]
		switch {
		case !ok:
			r = resetResult{ID: id, Result: "not found"}
		case r.StuckDeliveries > 0:
			r.OK, r.Result = true, fmt.Sprintf("%d stuck %s back to pending, to be delivered again", r.StuckDeliveries, plural(r.StuckDeliveries, "delivery", "deliveries"))
		case r.Status == "stuck":
			r.OK, r.Result = true, "stuck message back to the relay, to be routed again"
		default:
			r.OK, r.Result = true, fmt.Sprintf("nothing stuck (%s): left as it is", r.Status)
		}
		results = append(results, r)
	}
	return results, nil
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
