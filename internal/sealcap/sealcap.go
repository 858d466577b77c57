// Package sealcap is the worker side of seals (package seal, a library
// module that inserting services import): the capability that seals what
// a ferry server inserts, verifies what it works, arms the database's
// claim of sealed jobs' run ids, cleans the claims on the leader, and says
// at start, in /readyz and in /metrics what the verifier refused.
package sealcap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/seal"
)

// NotReadyFor is how long after a job was refused for a missing seal
// /readyz fails: long enough for a deploy or an operator to see it.
const NotReadyFor = 15 * time.Minute

// Section is the seal capability's configuration (ferry.Config's Seal).
type Section struct {
	// Keys seal every job this process inserts and verify every job it
	// works (parse with seal.ParseKeys). With keys, a job runs only if
	// ferry sealed it; without, any row written to river_job runs, and the
	// server warns so at start. See package seal.
	Keys *seal.Keys `env:"FERRY_SEAL_KEYS" flag:"seal-keys" secret:"true" usage:"keys that seal and verify jobs: comma-separated base64, each at least 32 bytes; the first seals, all verify (set it in the environment, not on the command line)"`
	// Encrypt makes this process's seals encrypt the args too:
	// AES-256-GCM, so River UI and `enqueue jobs get` show an envelope,
	// not the args. Workers decrypt whatever was sealed encrypted with one
	// of their keys, whatever this says. Needs Keys.
	Encrypt bool `env:"FERRY_SEAL_ENCRYPT" flag:"seal-encrypt" usage:"seals also encrypt the args (AES-256-GCM): River UI then shows an envelope, not the args"`
	// ReplayWindow: a sealed job due longer ago than this that never
	// started is refused as stale; default seal.DefaultReplayWindow.
	ReplayWindow time.Duration `env:"FERRY_SEAL_REPLAY_WINDOW" flag:"seal-replay-window" usage:"a sealed job due longer ago than this that never started is refused as stale"`
}

// WithDefaults returns sec with every unset field at its default.
func (sec Section) WithDefaults() Section {
	sec.ReplayWindow = cmp.Or(sec.ReplayWindow, seal.DefaultReplayWindow)
	return sec
}

// Check returns what is wrong with a defaulted sec, one error each.
func (sec Section) Check() error {
	var errs []error
	if sec.Encrypt && sec.Keys.Len() == 0 {
		errs = append(errs, errors.New("seal encrypt needs seal keys: set FERRY_SEAL_KEYS"))
	}
	if sec.ReplayWindow < time.Minute {
		errs = append(errs, fmt.Errorf("seal replay window %s is under 1m", sec.ReplayWindow))
	}
	return errors.Join(errs...)
}

// Capability is the seal capability.
type Capability struct {
	sec      Section
	verifier *seal.Verifier // nil without keys
	b        *capability.Build
}

// New returns the capability of sec.
func New(sec Section) *Capability { return &Capability{sec: sec} }

// Name is "seal".
func (*Capability) Name() string { return "seal" }

// Build records, with keys: the seal of every insert (after the unique
// key's insert middleware), the verifier (first in the admit layer: a job
// ferry did not seal is refused before anything else sees it),
// ferry_seal_refused_total, the claims' cleaner on the leader
// ("seal-claims") and a readiness check. Keys or not, a step before River
// fetches arms the claim (with keys) and says at start whether jobs are
// sealed.
func (c *Capability) Build(b *capability.Build) error {
	c.b = b
	if c.sec.Keys.Len() > 0 {
		b.Middleware(capability.LayerInsert, seal.Middleware(c.sec.Keys.WithEncryption(c.sec.Encrypt)))
		v, err := seal.NewVerifier(seal.VerifierConfig{Keys: c.sec.Keys, ReplayWindow: c.sec.ReplayWindow, Logger: b.Logger})
		if err != nil {
			return err
		}
		c.verifier = v
		b.Middleware(capability.LayerAdmit, v)
		if err := b.Metrics.Register(collector{v}); err != nil {
			return err
		}
		b.Leader("seal-claims", seal.Cleaner(b.Pool, c.sec.ReplayWindow, b.Logger))
		b.Ready(func(context.Context) error { return c.ready() })
	}
	b.Around(capability.Step(c.arm))
	return nil
}

// arm arms the database's claim of sealed jobs' run ids when this worker
// has keys (seal.Arm): before River fetches, so that the claims of the
// jobs written from then on are taken as they are written, and the
// unsealed jobs counted are still waiting. Then it says whether jobs are
// sealed (say).
func (c *Capability) arm(ctx context.Context) error {
	if c.verifier != nil {
		armed, err := seal.Arm(ctx, c.b.Pool)
		if err != nil {
			return err
		}
		if armed {
			c.b.Logger.Info("seal: the database now claims the run ids of sealed jobs as they are written")
		}
	}
	c.say(ctx)
	return nil
}

// say says at start whether jobs are sealed. Without keys it is the
// contract warning. With keys it counts the unsealed jobs among the next
// 1000 available jobs of each of this worker's queues: each will be
// refused, and some inserter then runs without FERRY_SEAL_KEYS.
func (c *Capability) say(ctx context.Context) {
	log := c.b.Logger
	if c.verifier == nil {
		log.Warn("seal: jobs are not sealed; whoever can write river_job can run any registered kind with any args")
		return
	}
	var waiting int
	queues := make([]string, 0, len(c.b.Queues))
	for q := range c.b.Queues {
		queues = append(queues, q)
	}
	slices.Sort(queues)
	// The next jobs of each queue in River's fetch order, through its
	// fetch index: a bounded read before River starts, however long the
	// backlog (counting every waiting job read all of it).
	err := c.b.Pool.QueryRow(ctx, `
		SELECT count(*) FROM unnest($1::text[]) AS q(name), LATERAL (
			SELECT tags, metadata FROM river_job
			WHERE state = 'available' AND queue = q.name
			ORDER BY priority, scheduled_at, id
			LIMIT 1000) AS next
		WHERE NOT ferry_sealed(next.tags, next.metadata)`, queues).Scan(&waiting)
	if err != nil {
		log.Warn("seal: could not count unsealed waiting jobs", "error", err)
	}
	log.Info("seal: jobs are sealed and verified",
		"key_ids", c.sec.Keys.IDs(), "replay_window", c.sec.ReplayWindow, "unsealed_waiting", waiting)
	if waiting > 0 {
		log.Warn("seal: unsealed jobs are waiting and will be refused; an inserter runs without FERRY_SEAL_KEYS, or jobs were planted",
			"unsealed_waiting", waiting)
	}
}

// ready fails /readyz for NotReadyFor after a job was refused for a
// missing seal.
func (c *Capability) ready() error {
	last := c.verifier.LastMissing()
	if last.IsZero() || time.Since(last) > NotReadyFor {
		return nil
	}
	return fmt.Errorf("seal: %d jobs refused for a missing seal, the last at %s: an inserter runs without FERRY_SEAL_KEYS, or jobs were planted",
		c.verifier.Refused(seal.ReasonMissing), last.UTC().Format(time.RFC3339))
}

// collector exports ferry_seal_refused_total{reason}.
type collector struct{ v *seal.Verifier }

var refusedDesc = prometheus.NewDesc("ferry_seal_refused_total",
	"Jobs this worker refused to run because of their seal, by reason (missing, invalid, queue, replayed, stale).",
	[]string{"reason"}, nil)

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- refusedDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range seal.Reasons {
		ch <- prometheus.MustNewConstMetric(refusedDesc, prometheus.CounterValue, float64(c.v.Refused(r)), string(r))
	}
}
