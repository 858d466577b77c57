// Command handlerworker is a test binary of the end-to-end tests
// (internal/e2e/outbox_test.go): a service that embeds ferry as a user's
// service would, with one Go outbox handler, so that the tests can kill it
// at the worst moment.
//
// It runs ferry.New + Run on DATABASE_URL (the admin server off, JSON logs on
// stderr, 1 s leader ticks and standby probes, so that the jobs of a killed
// process are rescued within seconds) until SIGTERM or SIGINT, with one
// route: topic order.placed to the handler "effects". The handler writes its
// effect into the table
//
//	effects (event_id text PRIMARY KEY, payload jsonb)
//
// (the test creates it) inside the delivery's transaction, with a plain
// INSERT: a second effect for the same event fails loudly instead of being
// skipped. HANDLER_AUDIT=1 adds a second route, topic order.audited to the
// handler "audit", which writes the table
//
//	audits (event_id text PRIMARY KEY)
//
// the same way: a deploy that adds a route. Two environment variables make
// it misbehave:
//
//   - HANDLER_HOLD: after the insert, log "handler: effect written" (with
//     event_id) and block until the handler's context ends (or 60 s), so the
//     test can kill -9 the process between the effect and the commit.
//   - HANDLER_FAIL_AFTER_EFFECT: after the insert, return an error the first
//     time each event is handled (remembered in memory), so the attempt's
//     transaction rolls back and River retries it.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/outbox"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, log)
	stop()
	if err != nil {
		log.Error("handlerworker: stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	h := &handler{
		log:             log,
		hold:            os.Getenv("HANDLER_HOLD") != "",
		failAfterEffect: os.Getenv("HANDLER_FAIL_AFTER_EFFECT") != "",
		failed:          map[string]bool{},
	}
	routes := []outbox.Route{{Topic: "order.placed", Name: "effects", Handler: h.handle}}
	if os.Getenv("HANDLER_AUDIT") != "" {
		routes = append(routes, outbox.Route{Topic: "order.audited", Name: "audit", Handler: audit})
	}
	srv, err := ferry.New(ctx, ferry.Config{
		Database: ferry.DatabaseConfig{URL: os.Getenv("DATABASE_URL")},
		Queues:   ferry.QueuesConfig{Workers: map[string]int{"default": 10, "outbox": 10}, FetchPollInterval: 100 * time.Millisecond, ShutdownGrace: 5 * time.Second},
		Leader:   ferry.LeaderConfig{Tick: time.Second, StandbyProbe: time.Second},
		Admin:    ferry.AdminConfig{Addr: "off"},
		Outbox:   ferry.OutboxConfig{Routes: routes},
		Logger:   log,
	})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}

// audit is the Go receiver of order.audited (HANDLER_AUDIT).
func audit(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
	if _, err := tx.Exec(ctx, `INSERT INTO audits (event_id) VALUES ($1)`, msg.EventID()); err != nil {
		return fmt.Errorf("write the audit of event %s: %w", msg.EventID(), err)
	}
	return nil
}

// handler is the Go receiver of order.placed.
type handler struct {
	log             *slog.Logger
	hold            bool
	failAfterEffect bool

	mu     sync.Mutex
	failed map[string]bool // events already failed once (HANDLER_FAIL_AFTER_EFFECT)
}

// handle writes the effect in tx, the delivery's transaction, then
// misbehaves as the environment says.
func (h *handler) handle(ctx context.Context, tx pgx.Tx, msg outbox.Message) error {
	id := msg.EventID()
	if _, err := tx.Exec(ctx, `INSERT INTO effects (event_id, payload) VALUES ($1, $2)`, id, string(msg.Payload)); err != nil {
		return fmt.Errorf("write the effect of event %s: %w", id, err)
	}
	if h.hold {
		h.log.Info("handler: effect written", "event_id", id)
		t := time.NewTimer(60 * time.Second)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if h.failAfterEffect && h.failFirst(id) {
		return errors.New("failing after the effect, once (HANDLER_FAIL_AFTER_EFFECT)")
	}
	return nil
}

// failFirst reports whether this is the first failure asked for event id.
func (h *handler) failFirst(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failed[id] {
		return false
	}
	h.failed[id] = true
	return true
}
