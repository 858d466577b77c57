package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/jobs"
)

// fairnessSizes are -mode fairness's loads (issue 59's in full).
type fairnessSizes struct {
	PerKey    int           // share: each key's backlog
	Window    time.Duration // share: how long the worker works it
	Flood     int           // pickup: the flooding key's backlog
	QuietRate int           // pickup: the quiet key's inserts per second
	QuietDur  time.Duration // pickup: measured (after a warm-up of warmUp)
	FetchJobs int           // fetch ratio: the backlog of each side
	FetchKeys int           // fetch ratio: the keys it is spread over
	Rounds    int           // fetch ratio: paired rounds
}

var fairnessFull = fairnessSizes{PerKey: 100_000, Window: 30 * time.Second, Flood: 500_000, QuietRate: 5, QuietDur: 30 * time.Second,
	FetchJobs: 100_000, FetchKeys: 10_000, Rounds: 3}

// fairWeights are the share figure's keys and weights (1:2:7).
var fairWeights = map[string]float64{"a": 1, "b": 2, "c": 7}

// fairnessResult is -mode fairness: weighted fairness across a queue's
// keys (internal/limit's Fairness), enforced by a ferry server in this
// process with the `fairness:` section in its config file, registered
// before each backlog is written (as a running worker's is: each job
// parks behind its key's gate as it is inserted).
type fairnessResult struct {
	Sizes fairnessSizes `json:"sizes"`

	// Share: keys a, b, c of weights 1, 2, 7, each with PerKey jobs
	// waiting; a worker at its defaults works Window (less if a key's
	// backlog runs out first: ShareWindowSec); each key's share of the
	// jobs completed, read from the server's completion events.
	Completed      int                `json:"share_completed"`
	ShareWindowSec float64            `json:"share_window_seconds"`
	Shares         map[string]float64 `json:"shares"`
	ShareErrorMax  float64            `json:"fair_share_error_max"`

	// Pickup: one key floods Flood jobs; a quiet key inserts QuietRate a
	// second; its insert-to-start p99, against the same measurement (the
	// latency mode's method, the same rate and worker) without the flood
	// and without the fairness.
	FloodWriteSec  float64   `json:"flood_write_seconds"`
	QuietP50       float64   `json:"fair_quiet_key_pickup_p50_ms"`
	QuietP99       float64   `json:"fair_quiet_key_pickup_p99_ms"`
	BaseP50        float64   `json:"fair_quiet_baseline_p50_ms"`
	BaseP99        float64   `json:"fair_quiet_baseline_p99_ms"`
	QuietRatio     float64   `json:"fair_quiet_key_pickup_ratio"`
	LatencyP99     float64   `json:"latency_insert_to_start_p99_ms,omitempty"`
	QuietRatio500  float64   `json:"fair_quiet_key_pickup_ratio_vs_latency,omitempty"`
	FetchUnfair    float64   `json:"fetch_without_fairness_jobs_per_sec"`
	FetchFair      float64   `json:"fetch_with_fairness_jobs_per_sec"`
	FetchRatio     float64   `json:"fair_fetch_ratio"`
	FetchRatioEach []float64 `json:"fetch_ratios"`
}

// tenantNoop is a ferry.noop job's args with a tenant: the worker decodes
// them as jobs.NoopArgs, and the fairness reads the tenant.
type tenantNoop struct {
	Tenant string `json:"tenant"`
}

func (tenantNoop) Kind() string { return jobs.NoopArgs{}.Kind() }

// fairnessBench measures the three fairness figures; latencyP99, when
// not 0, is the run's latency_insert_to_start_p99_ms, reported against
// the quiet key's p99 as well.
func fairnessBench(ctx context.Context, serverURL string, sz fairnessSizes, latencyP99 float64) (fairnessResult, error) {
	res := fairnessResult{Sizes: sz, LatencyP99: latencyP99}
	dir, err := os.MkdirTemp("", "ferry-bench-fairness-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	shares, n, err := fairShares(ctx, serverURL, dir, sz.PerKey, sz.Window, &res.ShareWindowSec)
	if err != nil {
		return res, fmt.Errorf("share: %w", err)
	}
	res.Completed, res.Shares = n, shares
	res.ShareErrorMax = shareErrorMax(shares, fairWeights)

	if err := fairPickup(ctx, serverURL, dir, sz, &res); err != nil {
		return res, fmt.Errorf("pickup: %w", err)
	}
	if latencyP99 > 0 {
		res.QuietRatio500 = res.QuietP99 / latencyP99
	}

	p, err := fairFetch(ctx, serverURL, dir, sz.FetchJobs, sz.FetchKeys, sz.Rounds)
	if err != nil {
		return res, fmt.Errorf("fetch: %w", err)
	}
	res.FetchUnfair, res.FetchFair, res.FetchRatio, res.FetchRatioEach = p.Base, p.Other, p.Ratio(), p.Ratios
	return res, nil
}

// shareErrorMax is the largest |share - weight/total| / (weight/total)
// over the keys of weights.
func shareErrorMax(shares, weights map[string]float64) float64 {
	var total, worst float64
	for _, w := range weights {
		total += w
	}
	for k, w := range weights {
		want := w / total
		worst = max(worst, math.Abs(shares[k]-want)/want)
	}
	return worst
}

// fairConfig writes a worker config file whose `fairness:` shares queue
// default by the args' tenant with weights, and returns its path.
func fairConfig(dir string, weights map[string]float64) (string, error) {
	var b strings.Builder
	b.WriteString("fairness:\n  - queue: " + river.QueueDefault + "\n    key: tenant\n    weights: {")
	for i, k := range slices.Sorted(maps.Keys(weights)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %g", k, weights[k])
	}
	b.WriteString("}\n")
	cfg := filepath.Join(dir, "fairness.yaml")
	return cfg, os.WriteFile(cfg, []byte(b.String()), 0o600)
}

// registerFair registers the fairness fairConfig writes, as a running
// worker's registration has before the backlog is written.
func registerFair(weights map[string]float64) func(context.Context, *pgxpool.Pool) error {
	return registerLimits(limit.Limit{Name: limit.FairName(river.QueueDefault), Queue: river.QueueDefault,
		KeyField: "tenant", Fair: &limit.Fairness{Weights: weights, DefaultWeight: 1}})
}

// tenantBacklog writes n ferry.noop jobs, the i-th with tenant
// tenant(i), with River's COPY insert in batches of 10,000, then a
// checkpoint (backlogSettled's).
func tenantBacklog(ctx context.Context, pool *pgxpool.Pool, n int, tenant func(int) string) error {
	ic, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, 0, 10000)
	for i := 0; i < n; i += 10000 {
		params = params[:0]
		for j := i; j < min(i+10000, n); j++ {
			params = append(params, river.InsertManyParams{Args: tenantNoop{Tenant: tenant(j)}})
		}
		if _, err := ic.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint (the bench's role needs pg_checkpoint, as scripts/pg-up grants): %w", err)
	}
	return nil
}

// fairShares writes perKey jobs for each key of fairWeights (interleaved),
// runs a ferry server at its defaults with the fairness for window, and
// returns each key's share of the jobs it completed in the window, counted
// from its completion events, and how many it completed. The window
// closes early when a key's backlog runs out; took is how long it was.
func fairShares(ctx context.Context, serverURL, dir string, perKey int, window time.Duration, took *float64) (map[string]float64, int, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return nil, 0, err
	}
	defer drop()
	if err := registerFair(fairWeights)(ctx, pool); err != nil {
		return nil, 0, err
	}
	keys := slices.Sorted(maps.Keys(fairWeights))
	if err := tenantBacklog(ctx, pool, perKey*len(keys), func(i int) string { return keys[i%len(keys)] }); err != nil {
		return nil, 0, err
	}
	cfg, _, err := workerConfig(pool, false)
	if err != nil {
		return nil, 0, err
	}
	if cfg.ConfigFile, err = fairConfig(dir, fairWeights); err != nil {
		return nil, 0, err
	}
	cfg.Logger = workerLog()
	srv, stop, err := startServer(ctx, cfg)
	if err != nil {
		return nil, 0, err
	}
	defer stop()
	// The window opens as the server has started. The channel holds every
	// job of the backlog: River drops the events a full channel cannot
	// take.
	events, cancel := srv.River().SubscribeConfig(&river.SubscribeConfig{ChanSize: perKey * len(keys), Kinds: []river.EventKind{
		river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled,
	}})
	defer cancel()
	opened := time.Now()
	end := time.NewTimer(window)
	defer end.Stop()
	counts := map[string]int{}
	total := 0
	for done := false; !done; {
		select {
		case ev := <-events:
			if ev.Kind != river.EventKindJobCompleted {
				return nil, 0, fmt.Errorf("job %d %s: %v", ev.Job.ID, ev.Kind, ev.Job.Errors)
			}
			var a tenantNoop
			if err := json.Unmarshal(ev.Job.EncodedArgs, &a); err != nil {
				return nil, 0, fmt.Errorf("job %d's args: %w", ev.Job.ID, err)
			}
			counts[a.Tenant]++
			total++
			// A key whose backlog ran out no longer takes its share: the
			// window closes there if it comes before window's end.
			done = counts[a.Tenant] >= perKey
		case <-end.C:
			done = true
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
	if total == 0 {
		return nil, 0, fmt.Errorf("no job completed in %s", window)
	}
	*took = time.Since(opened).Seconds()
	shares := map[string]float64{}
	for k, c := range counts {
		shares[k] = float64(c) / float64(total)
	}
	return shares, total, nil
}

// fairPickup measures the quiet key's insert to start (the latency mode's
// method at sz.QuietRate, tenant "quiet") while key "flood" has sz.Flood
// jobs waiting under the fairness, and then the same without the flood and
// the fairness.
func fairPickup(ctx context.Context, serverURL, dir string, sz fairnessSizes, res *fairnessResult) error {
	cfgFile, err := fairConfig(dir, nil)
	if err != nil {
		return err
	}
	lats, err := quietSamples(ctx, serverURL, sz, cfgFile, res)
	if err != nil {
		return err
	}
	res.QuietP50, res.QuietP99 = pct(lats, 50), pct(lats, 99)
	base, err := quietSamples(ctx, serverURL, sz, "", res)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	res.BaseP50, res.BaseP99 = pct(base, 50), pct(base, 99)
	res.QuietRatio = res.QuietP99 / res.BaseP99
	return nil
}

// quietSamples is one side of fairPickup: with cfgFile, the fairness is
// registered, the flood written and the worker runs with the file; without,
// the quiet key's jobs are the queue's only ones.
func quietSamples(ctx context.Context, serverURL string, sz fairnessSizes, cfgFile string, res *fairnessResult) ([]float64, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return nil, err
	}
	defer drop()
	if cfgFile != "" {
		if err := registerFair(nil)(ctx, pool); err != nil {
			return nil, err
		}
		t := time.Now()
		if err := tenantBacklog(ctx, pool, sz.Flood, func(int) string { return "flood" }); err != nil {
			return nil, err
		}
		res.FloodWriteSec = time.Since(t).Seconds()
	}
	cfg, _, err := workerConfig(pool, false)
	if err != nil {
		return nil, err
	}
	cfg.ConfigFile = cfgFile
	lats, _, err := tenantLatencySamples(ctx, pool, cfg, sz.QuietRate, sz.QuietDur, "quiet")
	if err != nil || cfgFile == "" {
		return lats, err
	}
	// The flood must outlast the window, or the quiet key was measured on
	// an idle queue.
	var left bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job WHERE state IN ('available', 'pending'))`).Scan(&left); err != nil {
		return nil, err
	}
	if !left {
		return nil, fmt.Errorf("the flood of %d jobs was worked within the window: raise it", sz.Flood)
	}
	return lats, nil
}

// fairFetch works n no-op jobs spread over keys tenants with ferry's whole
// worker stack, without fairness and under a fairness over the tenants
// (registered before the backlog is written), in paired rounds.
func fairFetch(ctx context.Context, serverURL, dir string, n, keys, rounds int) (paired, error) {
	cfgFile, err := fairConfig(dir, nil)
	if err != nil {
		return paired{}, err
	}
	tenant := func(i int) string { return fmt.Sprintf("t%d", i%keys) }
	return pairedRounds(rounds,
		func() (float64, error) { return tenantThroughput(ctx, serverURL, n, tenant, "") },
		func() (float64, error) { return tenantThroughput(ctx, serverURL, n, tenant, cfgFile) })
}

// tenantThroughput is ferryThroughput over a backlog of tenants' jobs;
// with cfgFile, the fairness it holds is registered before the backlog is
// written and the worker runs with it.
func tenantThroughput(ctx context.Context, serverURL string, n int, tenant func(int) string, cfgFile string) (float64, error) {
	r := throughputRound{backlog: func(ctx context.Context, pool *pgxpool.Pool, n int) error {
		return tenantBacklog(ctx, pool, n, tenant)
	}}
	if cfgFile != "" {
		r.before = registerFair(nil)
		r.tune = []func(*ferry.Config){func(c *ferry.Config) { c.ConfigFile = cfgFile }}
	}
	return ferryThroughputOf(ctx, serverURL, n, r)
}
