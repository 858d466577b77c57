package ferrycli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/internal/base/schema"
)

func enqueueBroadcast() *cli.Command {
	return &cli.Command{
		Name:  "broadcast",
		Usage: "publish to, or listen on, broadcast channels",
		Description: `Broadcast messages reach the subscribers of their channel in every process
now, at most once (package broadcast). With FERRY_BROADCAST_KEYS, publish
signs and subscribe drops what is unsigned or forged, a copy of a message it
received (a replay), and a message published more than 2 minutes ago or
dated more than 30s ahead.

Examples:
   enqueue broadcast publish settings --data '{"reload":true}'
   enqueue broadcast subscribe settings board:42 --json`,
		Subcommands: []*cli.Command{broadcastPublish(), broadcastSubscribe()},
	}
}

func broadcastKeysFlag() cli.Flag {
	return &cli.StringFlag{Name: "keys", Usage: "keys that sign (the first) and verify (all) messages: comma-separated base64, each at least 32 bytes (set it in the environment, not on the command line)", EnvVars: []string{broadcast.EnvKeys}}
}

// broadcastConfig checks the channels and keys, before anything connects.
func broadcastConfig(c *cli.Context, channels []string) (broadcast.Keys, error) {
	for _, ch := range channels {
		if err := broadcast.CheckChannel(ch); err != nil {
			return nil, &UsageError{Err: err}
		}
	}
	keys, err := broadcast.ParseKeys(c.String("keys"))
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	return keys, nil
}

func broadcastPublish() *cli.Command {
	return &cli.Command{
		Name:      "publish",
		Usage:     "publish one message on a channel",
		ArgsUsage: "CHANNEL",
		Description: `CHANNEL is 1 to 128 letters, digits and _.:- characters; --data is JSON of
at most 64 KiB (inline, @file, or - for stdin). Subscribers that are
listening when it is published get it; nobody else ever will.

Examples:
   enqueue broadcast publish settings --data '{"reload":true}'
   enqueue broadcast publish board:42 --data @card.json`,
		Flags: []cli.Flag{
			databaseURLFlag(),
			&cli.StringFlag{Name: "data", Usage: "the message (required): JSON, @file or - (stdin)"},
			broadcastKeysFlag(),
			jsonFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageErrorf("publish takes one CHANNEL, got %d arguments", c.NArg())
			}
			channel := c.Args().First()
			keys, err := broadcastConfig(c, []string{channel})
			if err != nil {
				return err
			}
			if !c.IsSet("data") {
				return usageErrorf("publish needs --data JSON")
			}
			data, err := readDocument("data", c.String("data"), c.App.Reader, broadcast.MaxDataBytes)
			if err != nil {
				return err
			}
			if !json.Valid(data) {
				return usageErrorf("--data is not valid JSON")
			}
			msg := json.RawMessage(data)
			if compact, err := json.Marshal(msg); err == nil && len(compact) > broadcast.MaxDataBytes {
				return usageErrorf("--data is %d bytes of JSON, over the %d byte limit", len(compact), broadcast.MaxDataBytes)
			}
			err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
				b, err := broadcast.New(broadcast.Config{Pool: pool, Keys: keys, Schema: os.Getenv(schema.Env)})
				if err != nil {
					return err
				}
				defer b.Close()
				return b.Publish(ctx, channel, msg)
			})
			if err != nil {
				return err
			}
			out := outputFrom(c)
			if out.json {
				return out.JSON(map[string]any{"channel": channel, "published": true})
			}
			_, err = fmt.Fprintf(c.App.Writer, "published on %s\n", channel)
			return err
		},
	}
}

func broadcastSubscribe() *cli.Command {
	return &cli.Command{
		Name:      "subscribe",
		Usage:     "print the messages of channels until interrupted",
		ArgsUsage: "CHANNEL…",
		Description: `Prints each message of the channels as it arrives, until interrupted
(exit 0). With --json, one JSON object a line: {"channel", "data",
"published_at"} for a message, {"gap": true, "channel"} for a gap: messages
of that channel may have been missed (the listening session reconnected, or
this reader fell behind); they never come back.

A line "broadcast: subscribed to …" on stderr says it listens: what is
published after it is printed, or covered by a gap.

Examples:
   enqueue broadcast subscribe settings
   enqueue broadcast subscribe board:42 board:43 --json | jq .`,
		Flags: append([]cli.Flag{databaseURLFlag(), broadcastKeysFlag(), jsonFlag()}, logFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usageErrorf("subscribe takes at least one CHANNEL")
			}
			channels := c.Args().Slice()
			keys, err := broadcastConfig(c, channels)
			if err != nil {
				return err
			}
			logger, err := loggerFrom(c)
			if err != nil {
				return err
			}
			if err := needSession("enqueue broadcast subscribe"); err != nil {
				return err
			}
			out := eventPrinter{w: c.App.Writer, json: c.Bool("json")}
			return withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
				b, err := broadcast.New(broadcast.Config{Pool: pool, Keys: keys, Schema: os.Getenv(schema.Env), Logger: logger})
				if err != nil {
					return err
				}
				defer b.Close()
				sub, err := b.Subscribe(ctx, channels...)
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return err
				}
				fmt.Fprintf(c.App.ErrWriter, "broadcast: subscribed to %v\n", channels)
				for {
					ev, err := sub.Next(ctx)
					if err != nil {
						if ctx.Err() != nil || errors.Is(err, broadcast.ErrClosed) {
							return nil
						}
						return err
					}
					if err := out.print(ev); err != nil {
						return err
					}
				}
			})
		},
	}
}

// eventPrinter prints one line per event.
type eventPrinter struct {
	w    io.Writer
	json bool
}

func (p eventPrinter) print(ev broadcast.Event) error {
	var v any
	switch {
	case p.json && ev.Gap:
		v = struct {
			Gap     bool   `json:"gap"`
			Channel string `json:"channel"`
		}{true, ev.Channel}
	case p.json:
		v = struct {
			Channel     string          `json:"channel"`
			Data        json.RawMessage `json:"data"`
			PublishedAt time.Time       `json:"published_at"`
		}{ev.Channel, ev.Data, ev.PublishedAt}
	case ev.Gap:
		_, err := fmt.Fprintf(p.w, "%s gap: messages may have been missed\n", ev.Channel)
		return err
	default:
		_, err := fmt.Fprintf(p.w, "%s %s %s\n", ev.PublishedAt.Format(time.RFC3339Nano), ev.Channel, ev.Data)
		return err
	}
	enc := json.NewEncoder(p.w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
