package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/testkit/fleet"
)

// orderedResult is ordered outbox delivery against unordered delivery of
// the same load, in Rounds paired runs (the median round's figures): Keys keys of PerKey messages each, written up front, to
// one webhook route, delivered by Workers `worker run` processes (one of
// which is killed with kill -9 once a third is delivered, and replaced) to
// a receiver that answers FailShare of its requests 503 with Retry-After:
// 1, at random. Throughput runs from the workers' start to the last
// delivery. Violations counts, over every key, the first successful
// arrivals that came after a later message's of the same key.
type orderedResult struct {
	Keys            int     `json:"ordered_keys"`
	PerKey          int     `json:"ordered_messages_per_key"`
	Workers         int     `json:"ordered_workers"`
	Rounds          int     `json:"ordered_rounds"`
	FailShare       float64 `json:"ordered_receiver_fail_share"`
	OrderedPerSec   float64 `json:"ordered_msgs_per_sec"`
	UnorderedPerSec float64 `json:"unordered_msgs_per_sec"`
	Ratio           float64 `json:"ordered_throughput_ratio"`
	// Ratios are every round's, in order.
	Ratios     []float64 `json:"ordered_throughput_ratios"`
	Violations int       `json:"ordered_violations"`
	// UnorderedViolations is the same count for the unordered run: what
	// the ordering prevents.
	UnorderedViolations int `json:"unordered_violations"`
	// Overlaps counts requests of one key the receiver had in hand at
	// once in the ordered run.
	Overlaps int `json:"ordered_overlaps"`
	// Failed is how many requests the receiver failed in the ordered run.
	Failed int `json:"ordered_receiver_failed"`
}

// orderedTopic is the topic of the ordered bench's messages.
const orderedTopic = "bench.ordered"

// orderedBench runs rounds pairs of runs, the unordered load then the
// ordered one, each run in a database of its own, and reports the median
// round's throughputs and ratio (this machine's noise moves a single
// run's by a third) and every round's violations, overlaps and failures
// summed. queues, when set, is the workers' FERRY_QUEUES.
func orderedBench(ctx context.Context, serverURL string, keys, perKey, workers, rounds int, failShare float64, queues string) (orderedResult, error) {
	res := orderedResult{Keys: keys, PerKey: perKey, Workers: workers, Rounds: rounds, FailShare: failShare}
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	type round struct{ ordered, unordered, ratio float64 }
	var all []round
	for range max(rounds, 1) {
		un, err := orderedRun(ctx, serverURL, bin, dir, false, keys, perKey, workers, failShare, queues)
		if err != nil {
			return res, fmt.Errorf("unordered: %w", err)
		}
		or, err := orderedRun(ctx, serverURL, bin, dir, true, keys, perKey, workers, failShare, queues)
		if err != nil {
			return res, fmt.Errorf("ordered: %w", err)
		}
		if or.arrivals != keys*perKey || un.arrivals != keys*perKey {
			return res, fmt.Errorf("the receiver saw %d and %d first arrivals, want %d each", un.arrivals, or.arrivals, keys*perKey)
		}
		if un.perSec <= 0 {
			return res, errors.New("the unordered run measured no throughput")
		}
		res.UnorderedViolations += un.violations
		res.Violations, res.Overlaps, res.Failed = res.Violations+or.violations, res.Overlaps+or.overlaps, res.Failed+or.failed
		all = append(all, round{or.perSec, un.perSec, or.perSec / un.perSec})
		res.Ratios = append(res.Ratios, or.perSec/un.perSec)
	}
	slices.SortFunc(all, func(a, b round) int { return cmp.Compare(a.ratio, b.ratio) })
	mid := all[len(all)/2]
	res.OrderedPerSec, res.UnorderedPerSec, res.Ratio = mid.ordered, mid.unordered, mid.ratio
	return res, nil
}

type orderedRunResult struct {
	perSec                                 float64
	violations, overlaps, failed, arrivals int
}

// sequenceReceiver records, per key, the sequence numbers of the first
// successful arrival of each message, and fails a share of its requests.
type sequenceReceiver struct {
	mu        sync.Mutex
	rng       *rand.Rand
	failShare float64
	arrived   map[string][]int
	seen      map[[2]any]bool
	inFlight  map[string]int
	overlaps  int
	failed    int
}

func (s *sequenceReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var p struct {
		Key string `json:"key"`
		Seq int    `json:"seq"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.inFlight[p.Key]++
	if s.inFlight[p.Key] > 1 {
		s.overlaps++
	}
	fail := s.rng.Float64() < s.failShare
	if fail {
		s.failed++
	} else if k := [2]any{p.Key, p.Seq}; !s.seen[k] {
		s.seen[k] = true
		s.arrived[p.Key] = append(s.arrived[p.Key], p.Seq)
	}
	s.inFlight[p.Key]--
	s.mu.Unlock()
	if fail {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// violations counts first arrivals after a later message's, and arrivals.
func (s *sequenceReceiver) violations() (n, arrivals int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, seqs := range s.arrived {
		arrivals += len(seqs)
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				n++
			}
		}
	}
	return n, arrivals
}

func orderedRun(ctx context.Context, serverURL, bin, dir string, ordered bool, keys, perKey, workers int, failShare float64, queues string) (orderedRunResult, error) {
	var out orderedRunResult
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return out, err
	}
	defer drop()

	recv := &sequenceReceiver{rng: rand.New(rand.NewPCG(7, 11)), failShare: failShare,
		arrived: map[string][]int{}, seen: map[[2]any]bool{}, inFlight: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return out, err
	}
	srv := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	// Each sequence number in a statement of its own: a key's messages
	// are committed in turn, so their ids are their order.
	for seq := 1; seq <= perKey; seq++ {
		if _, err := pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, ordering_key)
			SELECT $1, jsonb_build_object('key', 'k' || k, 'seq', $2::int), CASE WHEN $4 THEN 'k' || k END
			FROM generate_series(1, $3) AS k`, orderedTopic, seq, keys, ordered); err != nil {
			return out, err
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE ferry_outbox"); err != nil {
		return out, err
	}
	cfg := filepath.Join(dir, fmt.Sprintf("ordered-%t.yaml", ordered))
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "outbox:\n  routes:\n    - topic: %s\n      name: sink\n      url: http://%s/hook\n", orderedTopic, ln.Addr()), 0o600); err != nil {
		return out, err
	}

	f := fleet.New()
	defer func() { _ = f.Kill(time.Minute) }()
	env := []string{"DATABASE_URL=" + pool.Config().ConnString(), "FERRY_CONFIG=" + cfg, "FERRY_LOG_FORMAT=json", "FERRY_LOG_LEVEL=warn"}
	if queues != "" {
		env = append(env, "FERRY_QUEUES="+queues)
	}
	start := time.Now()
	var procs []*fleet.Proc
	for range workers {
		p, err := f.Start(bin, env, "run", "--admin-addr", "off")
		if err != nil {
			return out, err
		}
		procs = append(procs, p)
	}
	total := keys * perKey
	killed := false
	deadline := time.Now().Add(15 * time.Minute)
	for {
		// Progress from the receiver, which costs the database nothing (a
		// count of ferry_outbox every 50 ms would be a sequential scan of
		// it, a load the run measured would carry); the database's own
		// count only once the receiver has had every message.
		recv.mu.Lock()
		arrived := len(recv.seen)
		recv.mu.Unlock()
		if arrived == total {
			var delivered int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM ferry_outbox WHERE status = 'delivered'`).Scan(&delivered); err != nil {
				return out, err
			}
			if delivered == total {
				break
			}
		}
		if !killed && arrived >= total/3 {
			// kill -9 of a worker mid-run, and one started in its place.
			if err := procs[0].Kill(); err != nil {
				return out, err
			}
			p, err := f.Start(bin, env, "run", "--admin-addr", "off")
			if err != nil {
				return out, err
			}
			procs = append(procs[1:], p)
			killed = true
		}
		for _, p := range procs {
			if p.Exited() {
				_, stderr := p.Tail(5)
				return out, fmt.Errorf("worker %s exited: %s", p, stderr)
			}
		}
		if time.Now().After(deadline) {
			var stuck int
			_ = pool.QueryRow(ctx, `SELECT count(*) FROM ferry_outbox WHERE status = 'stuck'`).Scan(&stuck)
			return out, fmt.Errorf("%d of %d arrived after 15 minutes (%d stuck)", arrived, total, stuck)
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	el := time.Since(start)
	if !killed {
		return out, errors.New("every message was delivered before the kill: too small a load")
	}
	if err := printWork(ctx, pool, f, ordered, total); err != nil {
		return out, err
	}
	var relayS, halfS, p99S, lastS float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM max(relayed_at) - $1), extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY delivered_at) - $1),
		extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY delivered_at) - $1), extract(epoch FROM max(delivered_at) - $1) FROM ferry_outbox`, start).Scan(&relayS, &halfS, &p99S, &lastS); err != nil {
		return out, err
	}
	// The rate to the last message recorded delivered, on the database's
	// clock: not to when a poll saw it.
	if lastS <= 0 {
		return out, fmt.Errorf("the last delivery recorded %.3f s after the start", lastS)
	}
	out.perSec = float64(total) / lastS
	if ordered {
		// A chain's link is delivered by a job of its own (a turn handed
		// on) or by an earlier link's job, which goes on with its chain
		// (chained): how many of each, the jobs, and the transactions that
		// inserted them (the jobs one transaction inserted share
		// created_at, River's now()).
		var jobs, inserts, own, chained int
		if err := pool.QueryRow(ctx, `SELECT count(DISTINCT j.id), count(DISTINCT j.created_at),
				count(*) FILTER (WHERE (j.args->>'message_id')::bigint = d.message_id), count(*) FILTER (WHERE (j.args->>'message_id')::bigint <> d.message_id)
			FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id`).Scan(&jobs, &inserts, &own, &chained); err != nil {
			return out, err
		}
		// For the links with a job of their own that delivered no other
		// (a job that went on with its chain attempted later links after
		// its own): from the predecessor's delivery to the job's insert
		// (the turn), to its first attempt (the fetch), and its last
		// attempt to its delivery.
		var (
			links                                          int
			turn50, turn99, fetch50, fetch99, run50, run99 float64
		)
		if err := pool.QueryRow(ctx, `WITH s AS (
			SELECT j.created_at AS started, j.attempted_at, d.delivered_at, j.attempt,
			       (j.args->>'message_id')::bigint = m.id AND count(*) OVER (PARTITION BY j.id) = 1 AS own,
			       lag(d.delivered_at) OVER (PARTITION BY m.ordering_key ORDER BY m.id) AS prev_delivered
			FROM ferry_outbox m JOIN ferry_outbox_delivery d ON d.message_id = m.id JOIN river_job j ON j.id = d.job_id)
			SELECT count(*), coalesce(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY started - prev_delivered)), 0),
			       coalesce(1000 * extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY started - prev_delivered)), 0),
			       coalesce(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY attempted_at - started) FILTER (WHERE attempt = 1)), 0),
			       coalesce(1000 * extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY attempted_at - started) FILTER (WHERE attempt = 1)), 0),
			       coalesce(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY delivered_at - attempted_at)), 0),
			       coalesce(1000 * extract(epoch FROM percentile_disc(0.99) WITHIN GROUP (ORDER BY delivered_at - attempted_at)), 0)
			FROM s WHERE prev_delivered IS NOT NULL AND own`).Scan(&links, &turn50, &turn99, &fetch50, &fetch99, &run50, &run99); err != nil {
			return out, err
		}
		fmt.Fprintf(os.Stderr, "ordered: %d deliveries by %d jobs inserted by %d transactions: %d by a job of their own, %d by an earlier message's job going on with its chain\n", own+chained, jobs, inserts, own, chained)
		// The chains that ended last, which set the run's pace: their
		// failures (each a wait of the receiver's Retry-After and a fetch)
		// and their longest wait between two deliveries (a kill's: the
		// rescue of the chain's job).
		krows, err := pool.Query(ctx, `WITH d AS (SELECT m.ordering_key AS k, d.delivered_at, d.attempts,
				d.delivered_at - lag(d.delivered_at) OVER (PARTITION BY m.ordering_key ORDER BY m.id) AS gap
			FROM ferry_outbox m JOIN ferry_outbox_delivery d ON d.message_id = m.id)
			SELECT k, extract(epoch FROM max(delivered_at) - $1), sum(attempts) - count(*), coalesce(extract(epoch FROM max(gap)), 0)
			FROM d GROUP BY k ORDER BY 2 DESC LIMIT 5`, start)
		if err != nil {
			return out, err
		}
		var (
			key       string
			last, gap float64
			fails     int
		)
		if _, err := pgx.ForEachRow(krows, []any{&key, &last, &fails, &gap}, func() error {
			fmt.Fprintf(os.Stderr, "ordered: key %s delivered last at %.1f s, after %d failures; its longest wait between two deliveries %.1f s\n", key, last, fails, gap)
			return nil
		}); err != nil {
			return out, err
		}
		var f50, f99, fmax float64
		if err := pool.QueryRow(ctx, `SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY f), percentile_disc(0.99) WITHIN GROUP (ORDER BY f), max(f)
			FROM (SELECT sum(d.attempts) - count(*) AS f FROM ferry_outbox m JOIN ferry_outbox_delivery d ON d.message_id = m.id GROUP BY m.ordering_key) x`).Scan(&f50, &f99, &fmax); err != nil {
			return out, err
		}
		fmt.Fprintf(os.Stderr, "ordered: failures per key p50 %.0f, p99 %.0f, max %.0f\n", f50, f99, fmax)
		if links > 0 {
			fmt.Fprintf(os.Stderr, "ordered steps of the %d links after the first with a job of their own and no other (ms): turn p50 %.0f p99 %.0f; fetch p50 %.0f p99 %.0f; last attempt to recorded p50 %.0f p99 %.0f\n", links, turn50, turn99, fetch50, fetch99, run50, run99)
		}
	}
	// How River fetched the delivery jobs (their last attempts: a fetch's
	// jobs share attempted_at and the fetching client), and how long a
	// retried attempt waited after the failure before it: the two figures
	// that explain a run's pace. (A chained link's failure snoozes its
	// job, which River records as no error: the retries here are of jobs'
	// own messages.)
	var fetches int
	var perFetch, gap50, retry50, retry90 float64
	if err := pool.QueryRow(ctx, `WITH f AS (SELECT attempted_at, attempted_by[array_length(attempted_by, 1)] AS who, count(*) AS n
			FROM river_job WHERE kind = 'outbox.deliver' GROUP BY 1, 2),
		g AS (SELECT attempted_at - lag(attempted_at) OVER (PARTITION BY who ORDER BY attempted_at) AS gap FROM f),
		r AS (SELECT attempted_at - (errors[array_length(errors, 1)]->>'at')::timestamptz AS wait FROM river_job WHERE kind = 'outbox.deliver' AND attempt >= 2)
		SELECT (SELECT count(*) FROM f), (SELECT coalesce(avg(n), 0) FROM f),
		       (SELECT coalesce(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY gap)), 0) FROM g),
		       (SELECT coalesce(1000 * extract(epoch FROM percentile_disc(0.5) WITHIN GROUP (ORDER BY wait)), 0) FROM r),
		       (SELECT coalesce(1000 * extract(epoch FROM percentile_disc(0.9) WITHIN GROUP (ORDER BY wait)), 0) FROM r)`).Scan(&fetches, &perFetch, &gap50, &retry50, &retry90); err != nil {
		return out, err
	}
	fmt.Fprintf(os.Stderr, "ordered=%t: %d fetches, %.1f jobs each, p50 %.0f ms between one worker's fetches; a retried attempt waited p50 %.0f, p90 %.0f ms after the failure\n",
		ordered, fetches, perFetch, gap50, retry50, retry90)
	fmt.Fprintf(os.Stderr, "ordered=%t: %.1f s in all; relayed by %.1f s, half delivered by %.1f s, 99%% by %.1f s, the last at %.1f s\n", ordered, el.Seconds(), relayS, halfS, p99S, lastS)
	out.violations, out.arrivals = recv.violations()
	recv.mu.Lock()
	out.overlaps, out.failed = recv.overlaps, recv.failed
	recv.mu.Unlock()
	return out, nil
}

// printWork stops the fleet and prints what the run cost the database per
// message, from its statistics (pg_stat_database, which the workers'
// sessions report as they end): commits, rows written and read, and
// buffers touched. Ordered and unordered runs of one load differ by what
// ordering costs.
func printWork(ctx context.Context, pool *pgxpool.Pool, f *fleet.Fleet, ordered bool, messages int) error {
	if err := f.Kill(time.Minute); err != nil {
		return err
	}
	// The workers' sessions (all named; the bench's are not) end once the
	// server sees their sockets closed.
	for deadline := time.Now().Add(30 * time.Second); ; {
		var others int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND backend_type = 'client backend'
			AND application_name <> ''`).Scan(&others); err != nil {
			return err
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d sessions of the stopped workers still open after 30 s", others)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var commits, inserted, updated, deleted, returned, fetched, blocks float64
	if err := pool.QueryRow(ctx, `SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_returned, tup_fetched, blks_hit + blks_read
		FROM pg_stat_database WHERE datname = current_database()`).Scan(&commits, &inserted, &updated, &deleted, &returned, &fetched, &blocks); err != nil {
		return err
	}
	n := float64(messages)
	fmt.Fprintf(os.Stderr, "ordered=%t: per message, %.2f commits, %.2f rows inserted, %.2f updated, %.2f deleted, %.1f returned, %.1f fetched, %.1f buffers\n",
		ordered, commits/n, inserted/n, updated/n, deleted/n, returned/n, fetched/n, blocks/n)
	// Where the rows were read: each table's sequential and index reads.
	rows, err := pool.Query(ctx, `SELECT relname, seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0)
		FROM pg_stat_user_tables WHERE seq_tup_read + coalesce(idx_tup_fetch, 0) > 0 ORDER BY seq_tup_read + coalesce(idx_tup_fetch, 0) DESC LIMIT 4`)
	if err != nil {
		return err
	}
	var (
		table                                string
		seqScans, seqRows, idxScans, idxRows float64
	)
	_, err = pgx.ForEachRow(rows, []any{&table, &seqScans, &seqRows, &idxScans, &idxRows}, func() error {
		fmt.Fprintf(os.Stderr, "ordered=%t: %s per message: %.2f sequential scans reading %.1f rows, %.2f index scans fetching %.1f rows\n",
			ordered, table, seqScans/n, seqRows/n, idxScans/n, idxRows/n)
		return nil
	})
	return err
}
