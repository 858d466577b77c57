// Package pglisten keeps a LISTEN session open on a dedicated connection,
// reconnecting with backoff, for the parts of ferry that are woken by
// NOTIFY (the elector's standbys, the outbox relays).
//
// LISTEN needs a session of its own: it does not work through a
// transaction-mode pooler.
package pglisten

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferryq/ferry/internal/base/redact"
)

// Config says where and what to listen to.
type Config struct {
	// ConnConfig opens the session (copied for each connection).
	ConnConfig *pgx.ConnConfig
	// Channel to LISTEN on.
	Channel string
	// OnListening runs each time the session is (re)established: a
	// notification sent while it was down is lost, so the caller should look
	// for what it may have missed.
	OnListening func()
	// OnNotify runs for each notification, on the listening goroutine.
	OnNotify func(*pgconn.Notification)
	// MaxBackoff caps the reconnect delay (which starts at 500ms).
	MaxBackoff time.Duration
	// Logger and Name (a log prefix such as "outbox: relay listener").
	Logger *slog.Logger
	Name   string
}

// Run listens until ctx ends.
func Run(ctx context.Context, cfg Config) {
	backoff := 500 * time.Millisecond
	maxBackoff := max(cfg.MaxBackoff, backoff)
	for ctx.Err() == nil {
		err := once(ctx, cfg)
		if ctx.Err() != nil {
			return
		}
		cfg.Logger.Warn(cfg.Name+": reconnecting", "error", redact.Postgres(fmt.Sprint(err)), "backoff", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

func once(ctx context.Context, cfg Config) error {
	conn, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{cfg.Channel}.Sanitize()); err != nil {
		return err
	}
	if cfg.OnListening != nil {
		cfg.OnListening()
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if cfg.OnNotify != nil {
			cfg.OnNotify(n)
		}
	}
}
