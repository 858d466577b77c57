package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/outbox"
)

// outboxResult holds the outbox figures: relay throughput by batch size
// (messages moved from pending to a delivery job per second, one route) and
// commit-to-delivery-start latency at a steady rate (a Go handler route,
// so the delivery's start is the handler's first line).
type outboxResult struct {
	RelayMessages   int                `json:"relay_messages"`
	RelayMsgsPerSec map[string]float64 `json:"relay_msgs_per_sec_by_batch"`
	BestRelayPerSec float64            `json:"outbox_relay_msgs_per_sec"`
	E2ERate         int                `json:"e2e_rate_per_sec"`
	E2EMessages     int                `json:"e2e_messages"`
	E2EP50MS        float64            `json:"outbox_e2e_p50_ms"`
	E2EP99MS        float64            `json:"outbox_e2e_p99_ms"`
	E2EMaxMS        float64            `json:"outbox_e2e_max_ms"`
	// The path split by the database's clocks: insert to the relay's
	// transaction (created_at to relayed_at), and that transaction to the
	// delivery job's fetch (relayed_at to attempted_at, the relay's commit
	// and River's wake-up included).
	RelayLagP50MS float64 `json:"outbox_relay_lag_p50_ms"`
	RelayLagP99MS float64 `json:"outbox_relay_lag_p99_ms"`
	FetchLagP50MS float64 `json:"outbox_fetch_lag_p50_ms"`
	FetchLagP99MS float64 `json:"outbox_fetch_lag_p99_ms"`
	// The tail's anatomy: over the messages at or above the p99, the
	// median of each leg (insert to relay transaction, that transaction
	// to the fetch, the fetch to the handler's first line), and the
	// checkpoints the server began while the latency was measured (their
	// writes and fsyncs slow every commit on the path).
	TailRelayMS float64 `json:"outbox_tail_relay_lag_ms"`
	TailFetchMS float64 `json:"outbox_tail_fetch_lag_ms"`
	TailWorkMS  float64 `json:"outbox_tail_work_lag_ms"`
	TailSamples int     `json:"outbox_tail_samples"`
	Checkpoints int64   `json:"outbox_checkpoints_during"`
	// The warm-up's figures: the server's first warmUp.
	E2EColdP99MS       float64 `json:"outbox_e2e_cold_p99_ms"`
	E2EColdMaxMS       float64 `json:"outbox_e2e_cold_max_ms"`
	FetchCooldownMS    float64 `json:"fetch_cooldown_ms"`
	FetchPollMS        float64 `json:"fetch_poll_interval_ms"`
	RelayBatchDefault  int     `json:"relay_batch_default"`
	RelayPollDefaultMS float64 `json:"relay_poll_default_ms"`
}

// relayBatches are the relay batch sizes whose throughput the outbox bench
// measures; the best is outbox_relay_msgs_per_sec.
var relayBatches = []int{100, 500, 1000, 2000, 5000}

func outboxBench(ctx context.Context, serverURL string, messages, rate int, dur time.Duration, batches []int) (outboxResult, error) {
	res := outboxResult{RelayMessages: messages, RelayMsgsPerSec: map[string]float64{}, E2ERate: rate,
		FetchCooldownMS: float64(ferry.DefaultFetchCooldown.Microseconds()) / 1000, FetchPollMS: float64(ferry.DefaultFetchPollInterval.Microseconds()) / 1000,
		RelayBatchDefault: outbox.DefaultBatchSize, RelayPollDefaultMS: float64(outbox.DefaultPollInterval.Milliseconds())}
	for _, batch := range batches {
		perSec, err := relayThroughput(ctx, serverURL, messages, batch)
		if err != nil {
			return res, err
		}
		res.RelayMsgsPerSec[fmt.Sprint(batch)] = perSec
		res.BestRelayPerSec = max(res.BestRelayPerSec, perSec)
	}
	lat, cold, lags, err := outboxLatency(ctx, serverURL, rate, dur)
	if err != nil {
		return res, err
	}
	res.TailRelayMS, res.TailFetchMS, res.TailWorkMS, res.TailSamples = lags.tail()
	res.Checkpoints = lags.checkpoints
	res.E2EColdP99MS, res.E2EColdMaxMS = pct(cold, 99), pct(cold, 100)
	relay, fetch := lags.column(func(g legs) float64 { return g.relay }), lags.column(func(g legs) float64 { return g.fetch })
	res.RelayLagP50MS, res.RelayLagP99MS = pct(relay, 50), pct(relay, 99)
	res.FetchLagP50MS, res.FetchLagP99MS = pct(fetch, 50), pct(fetch, 99)
	res.E2EMessages = len(lat)
	res.E2EP50MS, res.E2EP99MS, res.E2EMaxMS = pct(lat, 50), pct(lat, 99), pct(lat, 100)
	return res, nil
}

func relayThroughput(ctx context.Context, serverURL string, n, batch int) (float64, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload) SELECT 'bench', jsonb_build_object('i', i) FROM generate_series(1, $1) AS i`, n); err != nil {
		return 0, err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE ferry_outbox"); err != nil {
		return 0, err
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return 0, err
	}
	routes, err := outbox.NewRoutes(outbox.Route{Topic: "bench", Name: "hook", URL: "http://127.0.0.1:1/hook"})
	if err != nil {
		return 0, err
	}
	r := outbox.NewRelay(outbox.RelayConfig{Pool: pool, Inserter: client, Routes: routes, BatchSize: batch, Logger: slog.New(slog.DiscardHandler)})
	start := time.Now()
	if err := r.Drain(ctx); err != nil {
		return 0, err
	}
	el := time.Since(start)
	var left int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM ferry_outbox WHERE status = 'pending'").Scan(&left); err != nil || left != 0 {
		return 0, fmt.Errorf("relay left %d pending (%v)", left, err)
	}
	return float64(n) / el.Seconds(), nil
}

// outboxLags are the measured messages' paths (leg, one per message) and
// the checkpoints the server began while they were measured.
type outboxLags struct {
	leg         []legs
	checkpoints int64
}

// legs is one message's path, in ms: insert to the relay's transaction
// (relay), that transaction to River's fetch (fetch), the fetch to the
// handler's first line (work), and commit to that line (total).
type legs struct{ relay, fetch, work, total float64 }

// column returns one leg of every message.
func (l outboxLags) column(of func(legs) float64) []float64 {
	xs := make([]float64, len(l.leg))
	for i, g := range l.leg {
		xs[i] = of(g)
	}
	return xs
}

// tail returns the median of each leg over the messages whose total is at
// or above the p99, and how many those are.
func (l outboxLags) tail() (relay, fetch, work float64, n int) {
	p99 := pct(l.column(func(g legs) float64 { return g.total }), 99)
	var r, f, w []float64
	for _, g := range l.leg {
		if g.total >= p99 {
			r, f, w = append(r, g.relay), append(f, g.fetch), append(w, g.work)
		}
	}
	return pct(r, 50), pct(f, 50), pct(w, 50), len(r)
}

// sqlCheckpoints counts the checkpoints the server has begun.
const sqlCheckpoints = `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`

// warmUp is how long the outbox and pickup benches insert at their
// rate before they measure.
const warmUp = 2 * time.Second

// outboxLatency measures commit to delivery start for messages added at
// rate for dur, after a warm-up whose figures it returns apart (cold).
func outboxLatency(ctx context.Context, serverURL string, rate int, dur time.Duration) (lat, cold []float64, lags outboxLags, err error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return nil, nil, lags, err
	}
	defer drop()
	var (
		mu        sync.Mutex
		committed = map[int64]time.Time{}
		started   = map[int64]time.Time{}
	)
	handler := func(_ context.Context, _ pgx.Tx, msg outbox.Message) error {
		now := time.Now()
		mu.Lock()
		if _, seen := started[msg.ID]; !seen {
			started[msg.ID] = now
		}
		mu.Unlock()
		return nil
	}
	_, stop, err := startServer(ctx, ferry.Config{
		Database: ferry.DatabaseConfig{URL: pool.Config().ConnString()},
		Admin:    ferry.AdminConfig{Addr: "off"},
		Outbox:   ferry.OutboxConfig{Routes: []outbox.Route{{Topic: "bench", Name: "handler", Handler: handler}}},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, nil, lags, err
	}
	defer stop()

	// A warm-up of warmUp at the same rate first: a server's first
	// second (its pool filling, its leader's first passes) is slower, and
	// is reported apart (cold).
	warm := int(float64(rate) * warmUp.Seconds())
	n := int(float64(rate) * dur.Seconds())
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	var firstMeasured int64
	var checkpointsBefore int64
	if err := pool.QueryRow(ctx, sqlCheckpoints).Scan(&checkpointsBefore); err != nil {
		return nil, nil, lags, err
	}
	for i := range warm + n {
		<-t.C
		var id int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			id, err = outbox.Add(ctx, tx, "bench", `{}`)
			return err
		})
		if err != nil {
			return nil, nil, lags, err
		}
		at := time.Now()
		mu.Lock()
		committed[id] = at
		mu.Unlock()
		if i == warm {
			firstMeasured = id
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(started)
		mu.Unlock()
		if got >= warm+n {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, lags, fmt.Errorf("only %d of %d messages delivered", got, warm+n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := pool.QueryRow(ctx, sqlCheckpoints).Scan(&lags.checkpoints); err != nil {
		return nil, nil, lags, err
	}
	lags.checkpoints -= checkpointsBefore
	rows, err := pool.Query(ctx, `SELECT o.id, extract(epoch FROM o.relayed_at - o.created_at) * 1000,
		extract(epoch FROM j.attempted_at - o.relayed_at) * 1000, j.attempted_at
		FROM ferry_outbox o JOIN ferry_outbox_delivery d ON d.message_id = o.id JOIN river_job j ON j.id = d.job_id
		WHERE j.attempted_at IS NOT NULL AND o.id >= $1`, firstMeasured)
	if err != nil {
		return nil, nil, lags, err
	}
	var (
		id           int64
		relay, fetch float64
		attempted    time.Time
	)
	mu.Lock()
	defer mu.Unlock()
	if _, err := pgx.ForEachRow(rows, []any{&id, &relay, &fetch, &attempted}, func() error {
		lags.leg = append(lags.leg, legs{relay: relay, fetch: fetch,
			work:  float64(started[id].Sub(attempted).Microseconds()) / 1000,
			total: float64(started[id].Sub(committed[id]).Microseconds()) / 1000})
		return nil
	}); err != nil {
		return nil, nil, lags, err
	}
	if len(lags.leg) < n {
		return nil, nil, lags, fmt.Errorf("the path of %d of %d messages read back", len(lags.leg), n)
	}
	out := make([]float64, 0, n)
	for id, c := range committed {
		ms := float64(started[id].Sub(c).Microseconds()) / 1000
		if id < firstMeasured {
			cold = append(cold, ms)
		} else {
			out = append(out, ms)
		}
	}
	return out, cold, lags, nil
}
