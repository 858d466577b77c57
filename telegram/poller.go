package telegram

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/outbox"
)

// Defaults of PollerConfig.
const (
	DefaultPollTimeout  = 25 * time.Second
	DefaultErrorBackoff = 5 * time.Second
	DefaultAuthBackoff  = 60 * time.Second
)

// MaxMalformedRawBytes bounds the raw text of an update kept in
// ferry_telegram_malformed.
const MaxMalformedRawBytes = 64 << 10

// Error kinds of the poller itself, besides the client's (see KindServer
// and the others); LastErrorKind and the kind label of
// ferry_telegram_errors_total take them too.
const (
	// KindMalformed: an update could not be stored as an outbox message
	// (no update_id, over the payload limit, refused by jsonb) and went to
	// ferry_telegram_malformed.
	KindMalformed = "malformed"
	// KindFence: the leader's fence failed; the batch was not stored.
	KindFence = "fence"
	// KindDatabase: storing a batch or reading the offset failed.
	KindDatabase = "database"
)

// errorKinds are the kinds ferry_telegram_errors_total always reports (at 0
// until one happens), so rate() works from the start.
var errorKinds = []string{
	KindUnauthorized, KindConflict, KindRateLimited, KindServer, KindBadRequest, KindTransport,
	KindMalformed, KindFence, KindDatabase,
}

// States of a bot, in BotStatus.State.
const (
	// StatePolling: this process is the bot's consumer and polls.
	StatePolling = "polling"
	// StateBackingOff: this process is the bot's consumer and waits after
	// an error.
	StateBackingOff = "backing_off"
	// StateStandby: the poller is not running here (not the leader, or
	// between restarts).
	StateStandby = "standby"
	// StateOff: the bot's token is not set; no poller exists (OffStatus).
	StateOff = "off"
)

// Leader is what a poller needs of the election: the term its writes carry,
// and a fence that fails inside a transaction once the term is stale (it
// takes the runnable's context, which carries the runnable's term).
// *election.Elector implements it.
type Leader interface {
	Term() int64
	Fence(ctx context.Context, tx pgx.Tx) error
}

var botNameRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// ValidateBotName checks a bot's name: 1 to 64 of a-z, 0-9, _ and -. The
// name is the topic's suffix (telegram.<name>) and the key of
// ferry_telegram_offset; keep it stable.
func ValidateBotName(name string) error {
	if !botNameRE.MatchString(name) {
		return fmt.Errorf("telegram: bot name %q: 1 to 64 of a-z, 0-9, _ and -", name)
	}
	return nil
}

// Topic is the outbox topic of a bot's updates: "telegram." + bot.
func Topic(bot string) string { return "telegram." + bot }

// PollerConfig configures a Poller.
type PollerConfig struct {
	// Bot names the bot (see ValidateBotName). Required.
	Bot string
	// Client calls the bot's Bot API. Required.
	Client *Client
	// Pool is ferry's database. Required.
	Pool *pgxpool.Pool
	// Leader fences every batch's transaction. Required.
	Leader Leader
	// PollTimeout is the long-poll timeout sent to Telegram, in whole
	// seconds from 1s to 50s; default DefaultPollTimeout.
	PollTimeout time.Duration
	// AllowedUpdates are the update types to receive; nil keeps the bot's
	// previous setting.
	AllowedUpdates []string
	// ErrorBackoff is the wait after a failed getUpdates; default
	// DefaultErrorBackoff.
	ErrorBackoff time.Duration
	// AuthBackoff is the wait after a 401 (bad token) or a 409 (another
	// consumer, or a webhook); default DefaultAuthBackoff.
	AuthBackoff time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer, when set, receives the bot's metrics (labelled with the
	// bot, so the pollers of several bots share one registry).
	Registerer prometheus.Registerer
}

func (c PollerConfig) withDefaults() PollerConfig {
	c.PollTimeout = cmp.Or(c.PollTimeout, DefaultPollTimeout)
	c.ErrorBackoff = cmp.Or(c.ErrorBackoff, DefaultErrorBackoff)
	c.AuthBackoff = cmp.Or(c.AuthBackoff, DefaultAuthBackoff)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c PollerConfig) validate() error {
	var errs []error
	if err := ValidateBotName(c.Bot); err != nil {
		errs = append(errs, err)
	}
	if c.Client == nil {
		errs = append(errs, errors.New("telegram: PollerConfig.Client is nil"))
	}
	if c.Pool == nil {
		errs = append(errs, errors.New("telegram: PollerConfig.Pool is nil"))
	}
	if c.Leader == nil {
		errs = append(errs, errors.New("telegram: PollerConfig.Leader is nil"))
	}
	if c.PollTimeout < time.Second || c.PollTimeout > 50*time.Second {
		errs = append(errs, fmt.Errorf("telegram: bot %s: poll timeout %s: between 1s and 50s", c.Bot, c.PollTimeout))
	}
	if c.ErrorBackoff < 0 || c.AuthBackoff < 0 {
		errs = append(errs, fmt.Errorf("telegram: bot %s: negative backoff", c.Bot))
	}
	return errors.Join(errs...)
}

// BotStatus is a snapshot of one bot, for the admin surface.
type BotStatus struct {
	Bot string `json:"bot"`
	// State is StatePolling, StateBackingOff, StateStandby or StateOff.
	State string `json:"state"`
	// Term is the leader term the poller runs under; 0 unless running.
	Term int64 `json:"term"`
	// NextOffset is the offset the next getUpdates sends (the stored one
	// as this process last read or wrote it).
	NextOffset int64 `json:"next_offset"`
	// LastUpdateID is the newest update_id stored, 0 before any.
	LastUpdateID int64 `json:"last_update_id"`
	// UpdatesStored is the bot's count of updates stored as outbox
	// messages, all replicas together (ferry_telegram_offset), as this
	// process last read or wrote it.
	UpdatesStored int64 `json:"updates_stored"`
	// LastErrorKind is the kind of the last error (see the Kind
	// constants); it stays after recovery, with LastErrorAt.
	LastErrorKind string    `json:"last_error_kind,omitempty"`
	LastError     string    `json:"last_error,omitempty"`
	LastErrorAt   time.Time `json:"last_error_at,omitzero"`
	// LastPollAt is when getUpdates last answered ok.
	LastPollAt time.Time `json:"last_poll_at,omitzero"`
}

// OffStatus is the status of a bot whose token is not set: it has no
// poller.
func OffStatus(bot string) BotStatus { return BotStatus{Bot: bot, State: StateOff} }

// Poller is one bot's getUpdates consumer: Run is its leader runnable. Each
// batch is stored in one transaction (outbox messages and the next offset),
// and only then acknowledged to Telegram by the next call's offset. See the
// package documentation.
type Poller struct {
	cfg     PollerConfig
	log     *slog.Logger
	topic   string
	running atomic.Bool

	mu       sync.Mutex
	status   BotStatus
	stored   int64            // updates stored by this process (the counter)
	errCount map[string]int64 // errors by kind, in this process
}

// NewPoller validates cfg and returns a poller; nothing runs until Run.
func NewPoller(cfg PollerConfig) (*Poller, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Poller{
		cfg:      cfg,
		log:      cfg.Logger.With("bot", cfg.Bot),
		topic:    Topic(cfg.Bot),
		status:   BotStatus{Bot: cfg.Bot, State: StateStandby},
		errCount: map[string]int64{},
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(newPollerCollector(p)); err != nil {
			return nil, fmt.Errorf("telegram: bot %s: register metrics: %w", cfg.Bot, err)
		}
	}
	return p, nil
}

// Bot is the bot's name.
func (p *Poller) Bot() string { return p.cfg.Bot }

// Status returns a snapshot.
func (p *Poller) Status() BotStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

func (p *Poller) update(fn func(s *BotStatus)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fn(&p.status)
}

// recordError counts an error of kind and keeps it as the last one. The
// message is scrubbed of the token once more, whatever produced it.
func (p *Poller) recordError(kind string, err error, n int64) {
	msg := p.cfg.Client.redact(err.Error())
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errCount[kind] += n
	p.status.LastErrorKind, p.status.LastError, p.status.LastErrorAt = kind, msg, time.Now()
}

// Run is the leader runnable: it reads the bot's stored offset, then
// long-polls getUpdates and stores each batch, until ctx ends (leadership
// lost, or the process stopping), when it returns nil at once: the
// in-flight long poll is cancelled with ctx. A failed store (the fence
// refused, the database failed) returns the error, so the elector restarts
// Run, which reads the stored offset again. getUpdates failures are retried
// here, after ErrorBackoff (AuthBackoff for 401 and 409, Telegram's
// retry_after for 429).
func (p *Poller) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return fmt.Errorf("telegram: bot %s: poller already running (one getUpdates consumer per token)", p.cfg.Bot)
	}
	defer p.running.Store(false)
	term := p.cfg.Leader.Term()
	p.update(func(s *BotStatus) { s.State, s.Term = StatePolling, term })
	defer p.update(func(s *BotStatus) { s.State, s.Term = StateStandby, 0 })

	offset, err := p.loadOffset(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		p.recordError(KindDatabase, err, 1)
		return err
	}
	p.log.Info("telegram: polling", "offset", offset, "term", term)
	for {
		updates, err := p.cfg.Client.GetUpdates(ctx, offset, p.cfg.PollTimeout, p.cfg.AllowedUpdates)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !p.backOff(ctx, err) {
				return nil
			}
			continue
		}
		now := time.Now()
		p.update(func(s *BotStatus) { s.State, s.LastPollAt = StatePolling, now })
		if len(updates) == 0 {
			continue
		}
		next, err := p.store(ctx, updates)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if next == 0 {
			// No update of the batch has an update_id: there is no offset
			// that acknowledges them, and Telegram will send them again.
			// They are kept once in ferry_telegram_malformed; wait rather
			// than spin.
			p.log.Warn("telegram: batch without any update_id; offset not advanced", "updates", len(updates), "offset", offset, "retry_in", p.cfg.ErrorBackoff)
			if !p.sleep(ctx, p.cfg.ErrorBackoff) {
				return nil
			}
			continue
		}
		offset = next
	}
}

// backOff logs a getUpdates failure as what it means, records it and
// sleeps; false when ctx ended meanwhile.
func (p *Poller) backOff(ctx context.Context, err error) bool {
	kind := cmp.Or(ErrorKind(err), KindTransport)
	wait := p.cfg.ErrorBackoff
	msg := p.cfg.Client.redact(err.Error())
	switch kind {
	case KindUnauthorized:
		wait = p.cfg.AuthBackoff
		p.log.Error("telegram: bad token (401); polling paused", "kind", kind, "error", msg, "retry_in", wait)
	case KindConflict:
		wait = p.cfg.AuthBackoff
		p.log.Error("telegram: conflict (409): another getUpdates consumer or a webhook is set for this bot", "kind", kind, "error", msg, "retry_in", wait)
	default:
		var apiErr *APIError
		if errors.As(err, &apiErr) && apiErr.RetryAfter > 0 {
			wait = apiErr.RetryAfter
		}
		p.log.Warn("telegram: getUpdates failed", "kind", kind, "error", msg, "retry_in", wait)
	}
	p.recordError(kind, err, 1)
	return p.sleep(ctx, wait)
}

// sleep waits d in the backing-off state; false when ctx ended first.
func (p *Poller) sleep(ctx context.Context, d time.Duration) bool {
	p.update(func(s *BotStatus) { s.State = StateBackingOff })
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		p.update(func(s *BotStatus) { s.State = StatePolling })
		return true
	}
}

// SQL of the poller.
const (
	sqlLoadOffset = `SELECT next_offset, coalesce(last_update_id, 0), updates_stored FROM ferry_telegram_offset WHERE bot = $1`

	// The offset follows what Telegram sent, not the greatest ever stored:
	// after a week without updates Telegram may restart update_ids at a
	// random, possibly lower, number, and only an offset above those
	// acknowledges them.
	sqlSaveOffset = `INSERT INTO ferry_telegram_offset (bot, next_offset, last_update_id, updates_stored, term, updated_at)
		VALUES ($1, $2, $3, $4, $5, now())
		ON CONFLICT (bot) DO UPDATE SET next_offset = excluded.next_offset, last_update_id = excluded.last_update_id,
			updates_stored = ferry_telegram_offset.updates_stored + excluded.updates_stored,
			term = excluded.term, updated_at = now()
		RETURNING updates_stored`

	// A malformed update is kept once, however often Telegram resends it.
	sqlMalformed = `INSERT INTO ferry_telegram_malformed (bot, update_id, raw, error)
		SELECT $1::text, $2::bigint, $3::text, $4::text
		WHERE NOT EXISTS (SELECT 1 FROM ferry_telegram_malformed
			WHERE bot = $1::text AND update_id IS NOT DISTINCT FROM $2::bigint AND raw = $3::text)`

	sqlSamePayload = `SELECT payload = $3::jsonb FROM ferry_outbox WHERE topic = $1 AND dedup_key = $2`
)

// loadOffset reads the bot's stored offset (0 when none) and its counts.
func (p *Poller) loadOffset(ctx context.Context) (int64, error) {
	var next, last, stored int64
	err := p.cfg.Pool.QueryRow(ctx, sqlLoadOffset, p.cfg.Bot).Scan(&next, &last, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("telegram: bot %s: read the stored offset: %w", p.cfg.Bot, err)
	}
	p.update(func(s *BotStatus) { s.NextOffset, s.LastUpdateID, s.UpdatesStored = next, last, stored })
	return next, nil
}

// batch is what storing one batch did.
type batch struct {
	stored, duplicates int64
	malformed          []malformedUpdate
	maxID              int64 // 0 when no update had an id
	total              int64 // updates_stored after the batch
}

type malformedUpdate struct {
	id     *int64
	reason string
}

// store writes a batch in one transaction fenced by the leader's term: one
// outbox message per update (a malformed one to ferry_telegram_malformed)
// and the bot's next offset. It returns that offset, or 0 when no update
// had an id (nothing to acknowledge; the offset is unchanged).
func (p *Poller) store(ctx context.Context, updates []json.RawMessage) (int64, error) {
	term := p.cfg.Leader.Term()
	var (
		b      batch
		fenced bool
	)
	err := pgx.BeginFunc(ctx, p.cfg.Pool, func(tx pgx.Tx) error {
		b, fenced = batch{}, false
		if err := p.cfg.Leader.Fence(ctx, tx); err != nil {
			fenced = true
			return err
		}
		for _, raw := range updates {
			id, reason := parseUpdateID(raw)
			if id != nil && *id > b.maxID {
				b.maxID = *id
			}
			if reason == "" {
				var err error
				if reason, err = p.add(ctx, tx, *id, raw, &b); err != nil {
					return err
				}
			}
			if reason != "" {
				if _, err := tx.Exec(ctx, sqlMalformed, p.cfg.Bot, id, malformedRaw(raw), reason); err != nil {
					return fmt.Errorf("keep malformed update: %w", err)
				}
				b.malformed = append(b.malformed, malformedUpdate{id: id, reason: reason})
			}
		}
		if b.maxID == 0 {
			return nil
		}
		if err := tx.QueryRow(ctx, sqlSaveOffset, p.cfg.Bot, b.maxID+1, b.maxID, b.stored, term).Scan(&b.total); err != nil {
			return fmt.Errorf("save the offset: %w", err)
		}
		return nil
	})
	if err != nil {
		kind := KindDatabase
		if fenced {
			kind = KindFence
		}
		err = p.cfg.Client.redactErr(fmt.Errorf("telegram: bot %s: store %d update(s): %w", p.cfg.Bot, len(updates), err))
		if ctx.Err() == nil {
			p.recordError(kind, err, 1)
		}
		return 0, err
	}

	for _, m := range b.malformed {
		attrs := []any{"reason", m.reason, "term", term}
		if m.id != nil {
			attrs = append(attrs, "update_id", *m.id)
		}
		p.log.Warn("telegram: malformed update kept in ferry_telegram_malformed", attrs...)
		p.recordError(KindMalformed, errors.New(m.reason), 1)
	}
	if b.maxID == 0 {
		return 0, nil
	}
	next := b.maxID + 1
	p.mu.Lock()
	p.stored += b.stored
	p.status.NextOffset, p.status.LastUpdateID, p.status.UpdatesStored = next, b.maxID, b.total
	p.mu.Unlock()
	p.log.Debug("telegram: updates stored", "stored", b.stored, "duplicates", b.duplicates,
		"malformed", len(b.malformed), "last_update_id", b.maxID, "next_offset", next, "term", term)
	return next, nil
}

// parseUpdateID reads only update_id, so that no other field of an update,
// whatever its type, can fail it. A reason is returned when the update
// cannot be an outbox message; id is set whenever it could be read.
func parseUpdateID(raw json.RawMessage) (id *int64, reason string) {
	var u struct {
		UpdateID *int64 `json:"update_id"`
	}
	if err := json.Unmarshal(raw, &u); err != nil {
		// A wrong type of update_id, or not an object.
		return nil, "update_id unreadable: " + jsonErrorReason(err)
	}
	if u.UpdateID == nil {
		return nil, "no update_id"
	}
	if *u.UpdateID < 1 {
		return nil, fmt.Sprintf("update_id %d is not positive", *u.UpdateID)
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return u.UpdateID, "not valid JSON"
	}
	if compact.Len() > outbox.MaxPayloadBytes {
		return u.UpdateID, fmt.Sprintf("payload of %d bytes is over the outbox limit of %d", compact.Len(), outbox.MaxPayloadBytes)
	}
	return u.UpdateID, ""
}

// jsonErrorReason words a decoding error without quoting the input.
func jsonErrorReason(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("%s is a JSON %s", te.Field, te.Value)
		}
		return fmt.Sprintf("the update is a JSON %s, not an object", te.Value)
	}
	return err.Error()
}

// add stores one update as an outbox message, in a savepoint: an update the
// database refuses (a payload over the limit once jsonb renders it, text
// jsonb cannot hold) rolls back alone and is returned as a reason, and the
// batch goes on. A duplicate is already stored: Telegram sent it again.
func (p *Poller) add(ctx context.Context, tx pgx.Tx, id int64, raw json.RawMessage, b *batch) (reason string, err error) {
	key := strconv.FormatInt(id, 10)
	var stored bool
	err = pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		stored = false
		_, err := outbox.Add(ctx, sp, p.topic, raw, outbox.WithDedupKey(key))
		if !errors.Is(err, outbox.ErrDuplicate) {
			stored = err == nil
			return err
		}
		// Stored before: a redelivery, unless Telegram reused the id for
		// another update (ids restart at random after a week without
		// updates). Such an update is stored under the id suffixed with a
		// hash of its content, so it is neither lost nor doubled.
		var same bool
		if err := sp.QueryRow(ctx, sqlSamePayload, p.topic, key, string(raw)).Scan(&same); err != nil {
			return fmt.Errorf("compare with the stored update %d: %w", id, err)
		}
		if same {
			return nil
		}
		sum := sha256.Sum256(raw)
		alt := key + ":" + hex.EncodeToString(sum[:6])
		_, err = outbox.Add(ctx, sp, p.topic, raw, outbox.WithDedupKey(alt))
		if errors.Is(err, outbox.ErrDuplicate) {
			return nil
		}
		if err == nil {
			stored = true
			p.log.Warn("telegram: update_id reused by Telegram for a different update; stored under a suffixed dedup key",
				"update_id", id, "dedup_key", alt)
		}
		return err
	})
	switch {
	case err == nil && stored:
		b.stored++
		return "", nil
	case err == nil:
		b.duplicates++
		return "", nil
	case errors.Is(err, outbox.ErrPayloadTooLarge), errors.Is(err, outbox.ErrInvalidPayload):
		return "outbox refused the payload: " + err.Error(), nil
	case refusedData(err):
		return "database refused the payload: " + err.Error(), nil
	}
	return "", fmt.Errorf("store update %d: %w", id, err)
}

// refusedData reports whether err is Postgres refusing a value (a data
// exception, a check) rather than failing.
func refusedData(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "22") || pgErr.Code == "23514")
}

// malformedRaw is raw as text Postgres accepts (valid UTF-8, no NUL),
// truncated to MaxMalformedRawBytes.
func malformedRaw(raw []byte) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(string(raw), "\uFFFD"), "\x00", "\uFFFD")
	if len(s) <= MaxMalformedRawBytes {
		return s
	}
	i := MaxMalformedRawBytes
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
