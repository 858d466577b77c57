package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/startstop"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/pglisten"
	"github.com/ferryq/ferry/internal/redact"
)

// Relay defaults.
const (
	DefaultBatchSize    = 1000
	DefaultPollInterval = time.Second
	DefaultMaxAttempts  = 24
	// Queue is the River queue of outbox.deliver jobs.
	Queue = "outbox"
	// NotifyChannel is what the insert trigger of ferry_outbox notifies.
	NotifyChannel = "ferry_outbox"
)

// ErrNoRoute is why a message whose topic has no route is stuck: its text
// is the message's last_error.
var ErrNoRoute = errors.New("no route for topic")

// Inserter inserts River jobs in a transaction; *river.Client[pgx.Tx]
// implements it.
type Inserter interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	Pool     *pgxpool.Pool
	Inserter Inserter
	Routes   *Routes
	// BatchSize is how many messages one transaction claims.
	BatchSize int
	// PollInterval is the fallback when no notification arrives (a lost
	// LISTEN session, a writer that bypassed the trigger).
	PollInterval time.Duration
	// MaxAttempts of each delivery job (FERRY_OUTBOX_MAX_ATTEMPTS).
	MaxAttempts int
	Logger      *slog.Logger
}

// Relay moves pending messages into River delivery jobs. It runs on every
// replica: claims use FOR UPDATE SKIP LOCKED, so relays share the work and
// never relay a message twice.
type Relay struct {
	// BaseStartStop gives the relay ferry's one lifecycle shape: Start,
	// Stop (safe twice, and without Start), Started, Stopped.
	startstop.BaseStartStop

	cfg  RelayConfig
	wake chan struct{}
}

// NewRelay returns a relay; Start starts it.
func NewRelay(cfg RelayConfig) *Relay {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Relay{cfg: cfg, wake: make(chan struct{}, 1)}
}

// Start relays in the background until Stop (or ctx ends): at once, on
// every insert notification, and every PollInterval. A failing batch is
// logged and retried on the next wake; it never stops the relay.
func (r *Relay) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		defer stopped()
		started()
		r.run(ctx)
	}()
	return nil
}

func (r *Relay) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(ctx) })
	defer wg.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
		if err := r.Drain(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("outbox: relay failed; retrying", "error", redact.Postgres(err.Error()), "retry_in", r.cfg.PollInterval)
		}
		t.Reset(r.cfg.PollInterval)
	}
}

// Drain relays batches until none is full.
func (r *Relay) Drain(ctx context.Context) error {
	for {
		n, err := r.RelayOnce(ctx)
		if err != nil {
			return err
		}
		if n < r.cfg.BatchSize {
			return nil
		}
	}
}

// RelayOnce claims up to BatchSize pending messages, oldest first, and in
// the same transaction records one delivery per (message, route), inserts
// their outbox.deliver jobs and marks the messages relayed; a message whose
// topic has no route is marked stuck with ErrNoRoute. It returns how many
// messages it claimed.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT id, topic FROM ferry_outbox WHERE status = 'pending'
			ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`, r.cfg.BatchSize)
		if err != nil {
			return fmt.Errorf("claim messages: %w", err)
		}
		var (
			id       int64
			topic    string
			routed   []int64
			unrouted []int64
			msgIDs   []int64
			names    []string
			params   []river.InsertManyParams
		)
		_, err = pgx.ForEachRow(rows, []any{&id, &topic}, func() error {
			routes := r.cfg.Routes.For(topic)
			if len(routes) == 0 {
				unrouted = append(unrouted, id)
				return nil
			}
			routed = append(routed, id)
			for _, rt := range routes {
				msgIDs, names = append(msgIDs, id), append(names, rt.Name)
				params = append(params, river.InsertManyParams{
					Args:       DeliverArgs{MessageID: id, Route: rt.Name},
					InsertOpts: &river.InsertOpts{Queue: Queue, MaxAttempts: r.cfg.MaxAttempts},
				})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("claim messages: %w", err)
		}
		n = len(routed) + len(unrouted)
		if len(params) > 0 {
			res, err := r.cfg.Inserter.InsertManyTx(ctx, tx, params)
			if err != nil {
				return fmt.Errorf("insert delivery jobs: %w", err)
			}
			jobIDs := make([]int64, len(res))
			for i, jr := range res {
				jobIDs[i] = jr.Job.ID
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ferry_outbox_delivery (message_id, route, job_id)
				SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])`, msgIDs, names, jobIDs); err != nil {
				return fmt.Errorf("record deliveries: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE ferry_outbox SET status = 'relayed', relayed_at = now() WHERE id = ANY($1)`, routed); err != nil {
				return fmt.Errorf("mark relayed: %w", err)
			}
		}
		if len(unrouted) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE ferry_outbox SET status = 'stuck', last_error = $2 WHERE id = ANY($1)`, unrouted, ErrNoRoute.Error()); err != nil {
				return fmt.Errorf("mark unrouted: %w", err)
			}
			r.cfg.Logger.Warn("outbox: messages with no route for their topic are stuck", "count", len(unrouted), "first_id", unrouted[0])
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: relay: %w", err)
	}
	return n, nil
}

// listen keeps a LISTEN session on NotifyChannel and wakes the loop on
// every notification and every reconnect (messages may have arrived while
// the session was down).
func (r *Relay) listen(ctx context.Context) {
	cc := r.cfg.Pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = "ferry-outbox-relay"
	pglisten.Run(ctx, pglisten.Config{
		ConnConfig:  cc,
		Channel:     NotifyChannel,
		OnListening: r.poke,
		OnNotify:    func(*pgconn.Notification) { r.poke() },
		MaxBackoff:  30 * time.Second,
		Logger:      r.cfg.Logger,
		Name:        "outbox: relay listener (polling meanwhile)",
	})
}

func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}
