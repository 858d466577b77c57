package broadcast

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/base/pglisten"
	"github.com/ferryq/ferry/internal/base/schema"
)

// NotifyChannel is the one Postgres channel every ferry broadcast travels
// on; the ferry channel is in the payload.
const NotifyChannel = "ferry_broadcast"

// Defaults of Config.
const (
	DefaultQueueSize = 1024
	DefaultRetention = 5 * time.Minute
)

// ErrNoDatabase is returned by PublishTx on an in-process Broker: without a
// database there is no transaction whose commit could carry the message.
var ErrNoDatabase = errors.New("broadcast: PublishTx needs a database, and this broker is in-process")

// Config configures a Broker. The zero value is an in-process bus.
type Config struct {
	// Pool publishes, and reads large messages. Nil makes the Broker an
	// in-process bus: messages reach this process's subscribers only.
	Pool *pgxpool.Pool
	// ListenConfig opens the LISTEN session (it needs a session of its
	// own: a direct connection or a session-mode pool). Default: the
	// Pool's connection settings.
	ListenConfig *pgx.ConnConfig
	// Schema is the deployment's FERRY_SCHEMA (package internal/base/schema):
	// its brokers travel on a channel of their own, NotifyChannel and the
	// schema's name, so that deployments sharing a database never hear
	// each other. Default "": NotifyChannel.
	Schema string
	// Keys sign (the first) and verify (all) messages; see ParseKeys.
	// Without keys messages are neither signed nor checked.
	Keys Keys
	// ReplayWindow, with Keys, is how old a received message may be
	// (default DefaultReplayWindow): an older one is dropped as stale, and
	// a copy of one already received within the window as replayed. A
	// PublishTx whose transaction commits later than that after the call
	// is dropped as stale too.
	ReplayWindow time.Duration
	// MaxClockSkew, with Keys, is how far ahead of the receiver's clock a
	// message may be dated (default DefaultMaxClockSkew).
	MaxClockSkew time.Duration
	// QueueSize bounds each subscription's queue of messages (default
	// DefaultQueueSize); a message that finds it full becomes a gap.
	QueueSize int
	// Retention of large messages' rows (default DefaultRetention).
	Retention time.Duration
	// Logger (default: discard).
	Logger *slog.Logger
	// Now is the clock of published_at and of the replay window (default
	// time.Now).
	Now func() time.Time
}

// Broker publishes messages and fans them out to this process's
// subscriptions. It holds at most one LISTEN session, opened by the first
// Subscribe, whatever the number of subscriptions.
type Broker struct {
	cfg    Config
	keys   Keys
	logger *slog.Logger
	// notifyChannel is the Postgres channel of the Broker's deployment:
	// NotifyChannel, named after its schema in a schema of its own.
	notifyChannel string

	mu     sync.Mutex
	subs   map[*Subscription]struct{}
	closed bool

	listenOnce sync.Once
	ready      chan struct{} // closed once the session first listens
	cancel     context.CancelFunc
	stopped    chan struct{}
	ctx        context.Context

	lastPrune atomic.Int64 // unix nanoseconds
	lastT     atomic.Int64 // the last published_at, unix microseconds
	dropped   sync.Map     // reason → *atomic.Uint64
	replay    *replayGuard // with keys; on the listening goroutine only
}

// New returns a Broker. It opens nothing until the first Subscribe.
func New(cfg Config) (*Broker, error) {
	for i, k := range cfg.Keys {
		if len(k) < MinKeyBytes {
			return nil, fmt.Errorf("%w: key %d of %d is %d bytes, at least %d are needed", ErrInvalidKeys, i+1, len(cfg.Keys), len(k), MinKeyBytes)
		}
	}
	if cfg.QueueSize < 0 || cfg.Retention < 0 || cfg.ReplayWindow < 0 || cfg.MaxClockSkew < 0 {
		return nil, errors.New("broadcast: QueueSize, Retention, ReplayWindow and MaxClockSkew cannot be negative")
	}
	cfg.QueueSize = cmp.Or(cfg.QueueSize, DefaultQueueSize)
	cfg.Retention = cmp.Or(cfg.Retention, DefaultRetention)
	cfg.ReplayWindow = cmp.Or(cfg.ReplayWindow, DefaultReplayWindow)
	cfg.MaxClockSkew = cmp.Or(cfg.MaxClockSkew, DefaultMaxClockSkew)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s, err := schema.Parse(cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("broadcast: %w", err)
	}
	if cfg.Pool != nil && cfg.ListenConfig == nil {
		cfg.ListenConfig = cfg.Pool.Config().ConnConfig
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Broker{
		cfg: cfg, keys: cfg.Keys, logger: cfg.Logger, notifyChannel: schema.Channel(NotifyChannel, s),
		subs:  map[*Subscription]struct{}{},
		ready: make(chan struct{}), stopped: make(chan struct{}),
		ctx: ctx, cancel: cancel,
		replay: newReplayGuard(cfg.ReplayWindow, cfg.MaxClockSkew),
	}
	for _, r := range DropReasons {
		b.dropped.Store(r, new(atomic.Uint64))
	}
	return b, nil
}

// Publish sends v, as JSON, to every subscriber of channel in every process
// (in this process only, for an in-process Broker). It returns once
// Postgres has taken the message: at most once, never retried.
func (b *Broker) Publish(ctx context.Context, channel string, v any) error {
	if b.cfg.Pool == nil {
		return b.publishLocal(channel, v)
	}
	return b.publish(ctx, b.cfg.Pool, channel, v)
}

// PublishTx publishes v in the caller's transaction: the message is
// delivered if and only if tx commits, after it commits.
func (b *Broker) PublishTx(ctx context.Context, tx pgx.Tx, channel string, v any) error {
	if b.cfg.Pool == nil {
		return ErrNoDatabase
	}
	return b.publish(ctx, tx, channel, v)
}

// execer is a pool or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

func (b *Broker) publish(ctx context.Context, db execer, channel string, v any) error {
	data, err := b.prepare(channel, v)
	if err != nil {
		return err
	}
	t := b.publishedAt()
	var sig string
	if len(b.keys) > 0 {
		sig = sign(b.keys[0], channel, t, data)
	}
	if env := inlineEnvelope(channel, t, sig, data); len(env) <= maxNotifyBytes {
		if _, err := db.Exec(ctx, sqlNotify, b.notifyChannel, string(env)); err != nil {
			return fmt.Errorf("broadcast: publish on %s: %w", channel, err)
		}
		return nil
	}
	if _, err := db.Exec(ctx, sqlInsertLarge, channel, string(data), unixMicro(t), nullable(sig), b.notifyChannel, t); err != nil {
		return fmt.Errorf("broadcast: publish on %s (%d bytes, through ferry_broadcast_message): %w", channel, len(data), err)
	}
	b.maybePrune(ctx)
	return nil
}

// publishedAt is the time of a message published now, in unix
// microseconds, later than every earlier one of this Broker: two equal
// messages published in the same microsecond would have one signature,
// and the second would be dropped as a replay.
func (b *Broker) publishedAt() int64 {
	for {
		last, now := b.lastT.Load(), b.cfg.Now().UnixMicro()
		t := max(now, last+1)
		if b.lastT.CompareAndSwap(last, t) {
			return t
		}
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// maybePrune deletes large messages older than the retention, at most once
// per half retention per process, on the pool (never in the caller's
// transaction). A failure is logged: the next large message tries again.
func (b *Broker) maybePrune(ctx context.Context) {
	now := time.Now().UnixNano()
	last := b.lastPrune.Load()
	if now-last < int64(b.cfg.Retention/2) || !b.lastPrune.CompareAndSwap(last, now) {
		return
	}
	if _, err := b.Prune(context.WithoutCancel(ctx)); err != nil {
		b.logger.Warn("broadcast: prune failed", "error", err)
	}
}

// Prune deletes the rows of large messages older than the retention and
// returns how many it deleted.
func (b *Broker) Prune(ctx context.Context) (int64, error) {
	if b.cfg.Pool == nil {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tag, err := b.cfg.Pool.Exec(ctx, sqlPrune, b.cfg.Retention.Microseconds())
	if err != nil {
		return 0, fmt.Errorf("broadcast: prune ferry_broadcast_message: %w", err)
	}
	return tag.RowsAffected(), nil
}

func (b *Broker) publishLocal(channel string, v any) error {
	data, err := b.prepare(channel, v)
	if err != nil {
		return err
	}
	b.dispatch(Event{Channel: channel, Data: data, PublishedAt: unixMicro(b.cfg.Now().UnixMicro())})
	return nil
}

// prepare checks that the broker is open and the channel valid, and
// returns v's JSON, checked for size.
func (b *Broker) prepare(channel string, v any) ([]byte, error) {
	b.mu.Lock()
	closed := b.closed
	b.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if err := CheckChannel(channel); err != nil {
		return nil, err
	}
	return encodeData(v)
}

// Subscribe returns a subscription to channels, closed when ctx ends or by
// its Close. With a database it returns once this process's LISTEN session
// listens (opening it on first use), so every message published after it
// returns reaches it or is covered by a gap.
func (b *Broker) Subscribe(ctx context.Context, channels ...string) (*Subscription, error) {
	if len(channels) == 0 {
		return nil, fmt.Errorf("%w: no channel given", ErrInvalidChannel)
	}
	for _, c := range channels {
		if err := CheckChannel(c); err != nil {
			return nil, err
		}
	}
	if b.cfg.Pool != nil {
		b.listenOnce.Do(b.startListener)
		select {
		case <-b.ready:
		case <-b.stopped:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("broadcast: subscribe: waiting for the LISTEN session: %w", context.Cause(ctx))
		}
	}
	s := &Subscription{
		b: b, channels: dedup(channels), size: b.cfg.QueueSize,
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, ErrClosed
	}
	b.subs[s] = struct{}{}
	b.mu.Unlock()
	stop := context.AfterFunc(ctx, s.Close)
	s.mu.Lock()
	s.stop = stop
	s.mu.Unlock()
	return s, nil
}

func dedup(cs []string) []string {
	out := make([]string, 0, len(cs))
	seen := map[string]bool{}
	for _, c := range cs {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

func (b *Broker) remove(s *Subscription) {
	b.mu.Lock()
	delete(b.subs, s)
	b.mu.Unlock()
}

// Close closes every subscription and the LISTEN session, and waits for
// the session's goroutine. It is safe to call more than once.
func (b *Broker) Close() {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return
	}
	b.closed = true
	subs := make([]*Subscription, 0, len(b.subs))
	for s := range b.subs {
		subs = append(subs, s)
	}
	b.mu.Unlock()
	for _, s := range subs {
		s.Close()
	}
	b.cancel()
	b.listenOnce.Do(func() { close(b.stopped) }) // never started: nothing to wait for
	<-b.stopped
}

// Dropped returns how many received messages this process dropped, by
// reason (DropReasons); ferry exports it as ferry_broadcast_dropped_total.
func (b *Broker) Dropped() map[string]uint64 {
	out := map[string]uint64{}
	b.dropped.Range(func(k, v any) bool {
		out[k.(string)] = v.(*atomic.Uint64).Load()
		return true
	})
	return out
}

func (b *Broker) drop(reason string) {
	v, _ := b.dropped.Load(reason)
	v.(*atomic.Uint64).Add(1)
}

// dispatch hands ev to every subscription on its channel, never blocking.
func (b *Broker) dispatch(ev Event) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		if s.wants(ev.Channel) && s.push(ev) {
			b.drop(DropOverflow)
		}
	}
}

// gapAll queues a gap of each of its channels in every subscription.
func (b *Broker) gapAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		for _, c := range s.channels {
			s.push(Event{Channel: c, Gap: true})
		}
	}
}

func (b *Broker) startListener() {
	host, _ := os.Hostname()
	cc := b.cfg.ListenConfig.Copy()
	cc.RuntimeParams["application_name"] = fmt.Sprintf("ferry-broadcast:%s:%d", host, os.Getpid())
	first := true
	go func() {
		defer close(b.stopped)
		pglisten.Run(b.ctx, pglisten.Config{
			ConnConfig: cc,
			Channel:    b.notifyChannel,
			OnListening: func() {
				if first {
					first = false
					close(b.ready)
					b.logger.Debug("broadcast: listening")
					return
				}
				// Whatever was published while the session was down is lost.
				b.logger.Info("broadcast: listening again, gap sent to every subscriber")
				b.gapAll()
			},
			OnNotify:   b.receive,
			MaxBackoff: 5 * time.Second,
			Logger:     b.logger,
			Name:       "broadcast: listener",
		})
	}()
}

// receive decodes, fetches (large messages), verifies and dispatches one
// notification, on the listening goroutine.
func (b *Broker) receive(n *pgconn.Notification) {
	var env envelope
	if err := json.Unmarshal([]byte(n.Payload), &env); err != nil || CheckChannel(env.C) != nil || (env.D == nil) == (env.R == 0) {
		b.drop(DropMalformed)
		return
	}
	data := []byte(env.D)
	if env.R != 0 {
		var err error
		data, err = b.fetch(env)
		if err != nil {
			b.drop(DropExpired)
			b.logger.Warn("broadcast: large message not read, gap sent", "channel", env.C, "id", env.R, "error", err)
			b.dispatch(Event{Channel: env.C, Gap: true})
			return
		}
	}
	reason := verify(b.keys, env.C, env.T, data, env.S)
	if reason == "" && len(b.keys) > 0 {
		// Genuine: refuse it if it is out of the window or a copy. The
		// MAC's bytes, not env.S, are remembered: base64 can spell the
		// same bytes more than one way.
		mac, _ := base64.RawStdEncoding.DecodeString(env.S)
		reason = b.replay.admit(mac, env.T, b.cfg.Now().UnixMicro())
	}
	if reason != "" {
		b.drop(reason)
		b.logger.Warn("broadcast: message dropped", "channel", env.C, "reason", reason)
		return
	}
	b.dispatch(Event{Channel: env.C, Data: data, PublishedAt: unixMicro(env.T)})
}

// fetch reads a large message's data from its row, which must match the
// notification's channel and time (the signature covers them).
func (b *Broker) fetch(env envelope) ([]byte, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	var channel, data string
	var at time.Time
	if err := b.cfg.Pool.QueryRow(ctx, sqlFetchLarge, env.R).Scan(&channel, &data, &at); err != nil {
		return nil, err
	}
	if channel != env.C || at.UnixMicro() != env.T {
		return nil, fmt.Errorf("row %d is of channel %q at %d, the notification says %q at %d", env.R, channel, at.UnixMicro(), env.C, env.T)
	}
	return []byte(data), nil
}
