// Package retention keeps ferry's own history tables from growing without
// bound: the schedule's ticks (ferry_periodic_tick), the leader terms
// (ferry_leader_term) and Telegram's malformed updates
// (ferry_telegram_malformed). The Cleaner is a leader runnable; it deletes
// rows older than each table's Keep in batches of Batch rows, each DELETE a
// transaction of its own, so no lock is held for long and a large backlog
// is cleaned a batch at a time, between everyone else's writes.
//
// What the other tables keep is theirs: delivered outbox messages and
// receive records (outbox.Retention, FERRY_OUTBOX_RETENTION), the rows of
// dead and stopped workers (internal/liveness, a day), large broadcast
// messages (broadcast, minutes), seal claims (seal.Cleaner), and River's
// finalized jobs (River's job cleaner, FERRY_*_JOB_RETENTION).
//
// Two rows are never deleted, whatever their age, because ferry reads them
// back: the newest tick of each schedule (the scheduler catches up from it
// after a leader change; without it a schedule would start afresh and owe
// nothing) and the newest term of each election key (the fence compares
// with it, and the next term is recorded after it).
package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/internal/base/loop"
	"github.com/ferryq/ferry/internal/capability"
)

// Defaults.
const (
	// DefaultKeep is how long ticks, terms and malformed updates are kept
	// (FERRY_TICK_RETENTION, FERRY_TERM_RETENTION,
	// FERRY_TELEGRAM_MALFORMED_RETENTION): a month of history for
	// `enqueue schedule ticks`, `enqueue leader` and the console.
	DefaultKeep = 30 * 24 * time.Hour
	// DefaultBatch is the most rows one DELETE removes.
	DefaultBatch = 1000
	// DefaultEvery is the interval between passes.
	DefaultEvery = 10 * time.Minute
	// MinKeep is the shortest retention a table may have.
	MinKeep = time.Hour
)

// Table is one table the Cleaner keeps in check.
type Table struct {
	// Name is the table's name, as logs and ferry_retention_deleted_total
	// show it.
	Name string
	// Keep is how long its rows are kept; 0 or less keeps them forever.
	Keep time.Duration
}

// The tables and their DELETEs: $1 is the age in seconds, $2 the batch.
var deletes = map[string]string{
	"ferry_periodic_tick": `DELETE FROM ferry_periodic_tick WHERE (schedule_id, tick_at) IN (
    SELECT t.schedule_id, t.tick_at FROM ferry_periodic_tick t
    WHERE t.tick_at < now() - make_interval(secs => $1)
      AND t.tick_at < (SELECT max(n.tick_at) FROM ferry_periodic_tick n WHERE n.schedule_id = t.schedule_id)
    LIMIT $2)`,
	"ferry_leader_term": `DELETE FROM ferry_leader_term WHERE term IN (
    SELECT t.term FROM ferry_leader_term t
    WHERE t.acquired_at < now() - make_interval(secs => $1)
      AND t.term < (SELECT max(n.term) FROM ferry_leader_term n WHERE n.key = t.key)
    LIMIT $2)`,
	"ferry_telegram_malformed": `DELETE FROM ferry_telegram_malformed WHERE id IN (
    SELECT id FROM ferry_telegram_malformed
    WHERE received_at < now() - make_interval(secs => $1)
    ORDER BY id LIMIT $2)`,
}

// Tables returns the three tables with their keeps: 0 is DefaultKeep, a
// negative keep keeps forever.
func Tables(ticks, terms, malformed time.Duration) []Table {
	keep := func(d time.Duration) time.Duration { return cmp.Or(d, DefaultKeep) }
	return []Table{
		{Name: "ferry_periodic_tick", Keep: keep(ticks)},
		{Name: "ferry_leader_term", Keep: keep(terms)},
		{Name: "ferry_telegram_malformed", Keep: keep(malformed)},
	}
}

// Config configures a Cleaner.
type Config struct {
	Pool   *pgxpool.Pool
	Tables []Table
	// Every is the interval between passes (default DefaultEvery); Batch
	// the most rows one DELETE removes (default DefaultBatch).
	Every  time.Duration
	Batch  int
	Logger *slog.Logger
	// Registerer, when set, gets ferry_retention_deleted_total{table}.
	Registerer prometheus.Registerer
}

// Cleaner deletes what is older than each table's Keep.
type Cleaner struct {
	cfg      Config
	mDeleted *prometheus.CounterVec
}

// New checks cfg and returns a Cleaner: a table ferry does not know, or a
// keep under MinKeep, is an error.
func New(cfg Config) (*Cleaner, error) {
	cfg.Every = cmp.Or(cfg.Every, DefaultEvery)
	cfg.Batch = cmp.Or(cfg.Batch, DefaultBatch)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Every < 0 || cfg.Batch < 1 {
		return nil, fmt.Errorf("retention: interval %s and batch %d must be positive", cfg.Every, cfg.Batch)
	}
	for _, t := range cfg.Tables {
		if _, ok := deletes[t.Name]; !ok {
			return nil, fmt.Errorf("retention: no retention for table %q", t.Name)
		}
		if t.Keep > 0 && t.Keep < MinKeep {
			return nil, fmt.Errorf("retention: %s: keep %s is under %s", t.Name, t.Keep, MinKeep)
		}
	}
	c := &Cleaner{cfg: cfg, mDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_retention_deleted_total",
		Help: "Rows of ferry's history tables (ticks, terms, Telegram's malformed updates) deleted by retention, by table.",
	}, []string{"table"})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(c.mDeleted); err != nil {
			return nil, fmt.Errorf("retention: register metrics: %w", err)
		}
	}
	return c, nil
}

// Run cleans now and every Every until ctx ends; it is a leader runnable.
// A failed pass returns its error, and the elector runs it again after a
// backoff.
func (c *Cleaner) Run(ctx context.Context) error {
	return loop.Every(ctx, c.cfg.Every, func(ctx context.Context) error {
		_, err := c.Clean(ctx)
		return err
	})
}

// Clean runs one pass: for each table kept for a while, DELETEs of at most
// Batch rows until one deletes fewer. It returns the rows deleted by table.
func (c *Cleaner) Clean(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	for _, t := range c.cfg.Tables {
		if t.Keep <= 0 {
			continue
		}
		var total int64
		for {
			tag, err := c.cfg.Pool.Exec(ctx, deletes[t.Name], t.Keep.Seconds(), c.cfg.Batch)
			if err != nil {
				return out, fmt.Errorf("retention: %s: %w", t.Name, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < int64(c.cfg.Batch) {
				break
			}
		}
		out[t.Name] = total
		if total > 0 {
			c.mDeleted.WithLabelValues(t.Name).Add(float64(total))
			c.cfg.Logger.Info("retention: deleted", "table", t.Name, "count", total, "older_than", t.Keep.String())
		}
	}
	return out, nil
}

// Section is the retention configuration (ferry.Config's Retention): how
// long each history table keeps its rows, ferry's (0 is DefaultKeep) and
// River's jobs' (0 is River's default). Negative keeps them forever; the
// newest tick of each schedule and the newest term stay whatever their
// age.
type Section struct {
	// Ticks keeps the schedule's ticks.
	Ticks time.Duration `env:"FERRY_TICK_RETENTION" flag:"tick-retention" zero:"keep" usage:"delete the schedule's ticks older than this, the newest of each schedule excepted (0 keeps everything)"`
	// Terms keeps the leader terms.
	Terms time.Duration `env:"FERRY_TERM_RETENTION" flag:"term-retention" zero:"keep" usage:"delete leader terms older than this, the newest excepted (0 keeps everything)"`
	// TelegramMalformed keeps Telegram's malformed updates.
	TelegramMalformed time.Duration `env:"FERRY_TELEGRAM_MALFORMED_RETENTION" flag:"telegram-malformed-retention" zero:"keep" usage:"delete Telegram's malformed updates older than this (0 keeps everything)"`
	// CompletedJobs, CancelledJobs and DiscardedJobs are River's job
	// retention, its job cleaner's: zero is River's default (24h, 24h,
	// 168h).
	CompletedJobs time.Duration `env:"FERRY_COMPLETED_JOB_RETENTION" flag:"completed-job-retention" zero:"keep" default:"24h0m0s" usage:"River deletes completed jobs older than this (0 keeps them)"`
	CancelledJobs time.Duration `env:"FERRY_CANCELLED_JOB_RETENTION" flag:"cancelled-job-retention" zero:"keep" default:"24h0m0s" usage:"River deletes cancelled jobs older than this (0 keeps them)"`
	DiscardedJobs time.Duration `env:"FERRY_DISCARDED_JOB_RETENTION" flag:"discarded-job-retention" zero:"keep" default:"168h0m0s" usage:"River deletes discarded jobs (dead letters) older than this (0 keeps them)"`
}

// WithDefaults returns sec with every unset field of ferry's tables at
// its default (River's are River's to default).
func (sec Section) WithDefaults() Section {
	sec.Ticks = cmp.Or(sec.Ticks, DefaultKeep)
	sec.Terms = cmp.Or(sec.Terms, DefaultKeep)
	sec.TelegramMalformed = cmp.Or(sec.TelegramMalformed, DefaultKeep)
	return sec
}

// Check returns what is wrong with a defaulted sec, one error each.
func (sec Section) Check() error {
	var errs []error
	for _, r := range []struct {
		what string
		d    time.Duration
	}{{"tick", sec.Ticks}, {"term", sec.Terms}, {"telegram malformed", sec.TelegramMalformed}} {
		if err := CheckKeep(r.what, r.d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CheckKeep says so when keep, the retention of what, is positive and
// under MinKeep.
func CheckKeep(what string, keep time.Duration) error {
	if keep > 0 && keep < MinKeep {
		return fmt.Errorf("%s retention %s is under 1h (0 keeps everything)", what, keep)
	}
	return nil
}

// River is d as River's job retention takes it: zero is River's default,
// negative River's -1 (keep forever).
func River(d time.Duration) time.Duration {
	if d < 0 {
		return -1
	}
	return d
}

// Capability is the retention of ferry's history tables: a leader runnable
// (the Cleaner) and its metric.
type Capability struct{ tables []Table }

// NewCapability checks sec and returns the capability.
func NewCapability(sec Section) (*Capability, error) {
	tables := Tables(sec.Ticks, sec.Terms, sec.TelegramMalformed)
	if _, err := New(Config{Tables: tables}); err != nil {
		return nil, err
	}
	return &Capability{tables: tables}, nil
}

// Name is "retention".
func (*Capability) Name() string { return "retention" }

// Build records the Cleaner as the leader runnable "retention".
func (c *Capability) Build(b *capability.Build) error {
	cleaner, err := New(Config{Pool: b.Pool, Tables: c.tables, Logger: b.Logger, Registerer: b.Metrics})
	if err != nil {
		return err
	}
	b.Leader("retention", cleaner.Run)
	return nil
}
