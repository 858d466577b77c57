// Command bench is ferry's bench harness. -mode all (go tool task bench) and
// -mode quick measure every figure side by side in one run, write
// bench/results.json (with the keys of the targets missed in
// targets_missed) and print a table with each target's verdict; the other
// modes measure one thing. -mode sweep
// measures River worker settings on this machine: pickup latency (insert to
// start) for jobs inserted at a steady rate by a separate client, and
// throughput from a backlog. ferry's fetch defaults (docs/tuning.md) rest
// on its figures.
//
//	go run ./tools/bench -mode sweep
//	go run ./tools/bench -mode latency -cooldown 1ms -poll 100ms -rate 500
//	go run ./tools/bench -mode orphans -trials 20   # kill -9 of a worker running 100 jobs
//	go run ./tools/bench -mode broadcast -duration 10s  # 1,000 signed messages/s to 3 subscriber processes
//	go run ./tools/bench -mode locks -lock-procs 16 -lock-acquisitions 10000 # fencing oracle with kills
//	go run ./tools/bench -mode pgbouncer -backlog 40000 # worker through PgBouncer (transaction mode) against direct
//	go run ./tools/bench -mode failover -trials 3 -partitions 100 -tick 1s # 100 network partitions of the leader
//	go run ./tools/bench -mode pgfailover -trials 5 # Postgres primary crashed, synchronous standby promoted
//	go run ./tools/bench -mode riverbest -backlog 50000 # ferry's defaults against bare River at River's own bench settings
//	go run ./tools/bench -mode otel -backlog 50000 # worker with every job traced (OTLP/HTTP to loopback) against without
//	go run ./tools/bench -mode ordered -keys 1000 -per-key 50 -trials 3 # ordered outbox delivery against unordered: 3 workers, a kill -9, a failing receiver
//	go run ./tools/bench -mode ordered -trials 3 -queues default=1000,outbox=20 # the same with 20 route workers per process
//	go run ./tools/bench -mode sealcleanup -claims 5000000 # the leader's cleanup of 5M expired seal claims: ms per 100,000 deleted, first and last
//	go run ./tools/bench -mode lean # a service importing jobs and outbox: modules and binary size against River alone
//	go run ./tools/bench -mode bulkcopy -backlog 1000000 # enqueue bulk (file and pipe) against a plain COPY, peak RSS
//	go run ./tools/bench -mode counts -backlog 5000000 # enqueue, console, River UI and /metrics counts with 5M finished jobs
//	go run ./tools/bench -mode scale -backlog 50000 -plots docs/bench # throughput and pickup with 0, 1M and 5M finished jobs, three paired rounds
//	go run ./tools/bench -mode scaling # Postgres CPU and WAL per job, outbox message and workflow step; a worker's connections
//	go run ./tools/bench -mode sustained -backlog 50000 -duration 10m # half the maximum for 10 minutes: p99 drift, dead tuples (vacuumed as autovacuum would where the server's is off)
//	go run ./tools/bench -mode pickup -rate 500 -duration 10s -plots docs/bench # insert to start after a warm-up; a sweep of rates
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/scratchdb"
	"github.com/ferryq/ferry/jobs"
)

type stampArgs struct {
	At     int64  `json:"at"`               // insert time, unix ns
	Warm   bool   `json:"warm,omitempty"`   // inserted during the warm-up
	Tenant string `json:"tenant,omitempty"` // a fairness's key (-mode fairness)
}

func (stampArgs) Kind() string { return "bench.stamp" }

type stampWorker struct {
	river.WorkerDefaults[stampArgs]
	mu   sync.Mutex
	lats []time.Duration
	done chan struct{}
	want int
}

func (w *stampWorker) Work(_ context.Context, job *river.Job[stampArgs]) error {
	lat := time.Since(time.Unix(0, job.Args.At))
	w.mu.Lock()
	w.lats = append(w.lats, lat)
	if len(w.lats) == w.want {
		close(w.done)
	}
	w.mu.Unlock()
	return nil
}

type setting struct {
	Name           string        `json:"name"`
	Cooldown       time.Duration `json:"cooldown"`
	Poll           time.Duration `json:"poll"`
	Workers        int           `json:"workers"`
	InsertCooldown time.Duration `json:"insert_cooldown"`
}

type result struct {
	setting
	Mode       string  `json:"mode"`
	Jobs       int     `json:"jobs"`
	P50MS      float64 `json:"p50_ms,omitempty"`
	P99MS      float64 `json:"p99_ms,omitempty"`
	MaxMS      float64 `json:"max_ms,omitempty"`
	JobsPerSec float64 `json:"jobs_per_sec,omitempty"`
}

func main() {
	var (
		mode     = flag.String("mode", "sweep", "all, quick, sweep, latency, throughput, failover, orphans, ticks, outbox, ordered, sealed, sealcleanup, bounded, pgbouncer, pgfailover, riverbest, otel, lean, bulkcopy, counts, scale, scaling, pickup, limits, limits-overhead, limits-backlog, fairness, sustained, workflow or aging")
		out      = flag.String("out", "bench/results.json", "all and quick modes: where to write the results")
		url      = flag.String("database-url", os.Getenv("TEST_DATABASE_URL"), "server to create scratch databases on")
		cooldown = flag.Duration("cooldown", ferry.DefaultFetchCooldown, "worker fetch cooldown")
		poll     = flag.Duration("poll", ferry.DefaultFetchPollInterval, "worker fetch poll interval")
		workers  = flag.Int("workers", 100, "workers in the queue")
		insCool  = flag.Duration("insert-cooldown", jobs.InsertNotifyCooldown, "inserting client's fetch cooldown (its insert-notify limiter)")
		rate     = flag.Int("rate", 500, "latency mode: inserts per second; ticks mode: load jobs per second")
		dur      = flag.Duration("duration", 4*time.Second, "latency and ticks modes: how long to run; aging mode: the aging period (default 10s); limits-backlog mode: the window (default 1m)")
		plots    = flag.String("plots", "", "pickup, scale and failover modes: draw SVG pictures into this directory (pickup: a sweep of insert rates)")
		claims   = flag.Int("claims", 5_000_000, "sealcleanup mode: expired seal claims to delete")
		backlog  = flag.Int("backlog", 50000, "throughput, sealed and pgbouncer modes: jobs in the backlog (sealed, pgbouncer: half); scaling mode: jobs (default 200,000); outbox mode: messages for the relay; workflow mode: steps (default 10,000); limits-backlog mode: jobs waiting (default 1,000,000); fairness mode: the flooding key's jobs (default 500,000)")
		trials   = flag.Int("trials", 20, "failover mode: trials of each kind; orphans and pgfailover modes: trials; ordered mode: rounds; riverbest and workflow modes: paired rounds (default 5); fairness mode: paired rounds of the fetch ratio (default 3)")
		parts    = flag.Int("partitions", -1, "failover mode: partition trials (default: -trials)")
		orphans  = flag.Int("jobs", 100, "orphans mode: running jobs of the killed worker")
		scheds   = flag.Int("schedules", 10, "ticks mode: schedules firing every second")
		keys     = flag.Int("keys", 1000, "ordered mode: ordering keys")
		perKey   = flag.Int("per-key", 50, "ordered mode: messages per key")
		queues   = flag.String("queues", "", "ordered mode: the workers' FERRY_QUEUES (default: ferry's, "+ferry.DefaultQueues+")")
		tick     = flag.Duration("tick", time.Second, "failover and orphans modes: leader tick and standby probe (failover 0: crash trials only, at the defaults of 1.5s and 60s)")
		fanins   = flag.Int("fanins", 100, "workflow mode: fan-in trials (a fan-in step after 1,000 dependencies)")
		cpuProf  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	)
	flag.Parse()
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		// Every mode returns through here or exits with log.Fatal, which
		// loses the profile: a failed run's profile is not worth reading.
		defer pprof.StopCPUProfile()
	}
	if *url == "" {
		*url = "postgres://ferry:ferry@127.0.0.1:5432/ferry?sslmode=disable"
	}
	ctx := context.Background()
	one := setting{Name: "custom", Cooldown: *cooldown, Poll: *poll, Workers: *workers, InsertCooldown: *insCool}
	var results []result
	run := func(mode string, s setting) {
		var r result
		var err error
		if mode == "latency" {
			r, err = latency(ctx, *url, s, *rate, *dur)
		} else {
			r, err = throughput(ctx, *url, s, *backlog)
		}
		if err != nil {
			log.Fatalf("bench: %s %s: %v", mode, s.Name, redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "%-10s %-34s workers=%-5d jobs=%-6d p50=%6.1fms p99=%6.1fms max=%6.1fms rate=%8.0f/s\n",
			mode, fmt.Sprintf("%s (%s/%s, ins %s)", s.Name, s.Cooldown, s.Poll, s.InsertCooldown), s.Workers, r.Jobs, r.P50MS, r.P99MS, r.MaxMS, r.JobsPerSec)
		results = append(results, r)
	}
	switch *mode {
	case "locks":
		r, err := lockBench(ctx, *url, *lockProcs, *lockAcquisitions, *lockKills)
		if err != nil {
			log.Fatalf("bench: locks: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "locks: %d processes, %d acquisitions, %d kill -9 and %d pg_terminate_backend of the holder: %d fenced writes, %d overlaps; handover p50 %.1f ms, p99 %.1f ms, max %.1f ms (%d handovers); kill to the lock free %v ms, to the next holder %v ms (ttl %d ms)\n",
			r.Procs, r.Acquisitions, r.Kills, r.Terminates, r.FencedWrites, r.Overlaps, r.HandoverP50MS, r.HandoverP99MS, r.HandoverMaxMS, r.Handovers, r.KillFreeMS, r.KillNextMS, r.TTLMS)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "broadcast":
		r, err := broadcastBench(ctx, *url, 3, 1000, *dur)
		if err != nil {
			log.Fatalf("bench: broadcast: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "broadcast: %d signed messages at %.0f/s to %d subscriber processes: received %v, gaps %v; publish to delivery p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
			r.Published, r.MsgsPerSec, r.Subscribers, r.Received, r.Gaps, r.P50MS, r.P99MS, r.MaxMS)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "workflow":
		steps, rounds := 10_000, 5
		if flagSet("backlog") {
			steps = *backlog
		}
		if flagSet("trials") {
			rounds = *trials
		}
		r, err := workflowBench(ctx, *url, steps, rounds, *fanins)
		if err != nil {
			log.Fatalf("bench: workflow: %v", redact.Postgres(err.Error()))
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "limits-backlog":
		n, d := 1_000_000, time.Minute
		if flagSet("backlog") {
			n = *backlog
		}
		if flagSet("duration") {
			d = *dur
		}
		r, err := limitBacklogBench(ctx, *url, n, 1000, 100, d)
		if err != nil {
			log.Fatalf("bench: limits-backlog: %v", redact.Postgres(err.Error()))
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "fairness":
		sz := fairnessFull
		if flagSet("backlog") {
			sz.Flood = *backlog
		}
		if flagSet("trials") {
			sz.Rounds = *trials
		}
		r, err := fairnessBench(ctx, *url, sz, 0)
		if err != nil {
			log.Fatalf("bench: fairness: %v", redact.Postgres(err.Error()))
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "aging":
		period := 10 * time.Second
		if flagSet("duration") {
			period = *dur
		}
		r, err := agingBench(ctx, *url, period, 30*time.Second)
		if err != nil {
			log.Fatalf("bench: aging: %v", redact.Postgres(err.Error()))
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "broadcast-sub": // a subscriber process of -mode broadcast
		if err := broadcastSub(ctx); err != nil {
			log.Fatalf("bench: broadcast subscriber: %v", redact.Postgres(err.Error()))
		}
		return
	case "all", "quick":
		if err := runAll(ctx, *url, *out, *mode == "quick"); err != nil {
			log.Fatalf("bench: %v", redact.Postgres(err.Error()))
		}
		return
	case "sealed":
		r, err := sealedThroughput(ctx, *url, *backlog, 5)
		if err != nil {
			log.Fatalf("bench: sealed: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "ferry worker, %d no-op jobs, 5 rounds: unsealed %.0f jobs/s, sealed %.0f jobs/s (best of each), ratio %.3f (median of the rounds'); jobs.Inserter sealed/unsealed: one per transaction %.3f, COPY %.3f\n",
			*backlog, r.Unsealed, r.Sealed, r.Ratio, r.InsertRatio, r.BulkRatio)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "pgfailover":
		r, err := pgFailover(ctx, *trials, *tick)
		if err != nil {
			log.Fatalf("bench: pgfailover: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "Postgres primary failover (crash, synchronous standby promoted; 3 workers, tick %d ms, 200 inserts/s; %d trials): promoted after %v ms; every worker back at work median %.0f ms max %.0f ms; %d of %d acknowledged inserts lost; %d workers replaced\n",
			r.TickMS, r.Trials, r.PromoteMS, r.RecoveryMedianMS, r.RecoveryMaxMS, r.Lost, r.Acknowledged, r.Replaced)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "bulkcopy":
		r, err := bulkVsCopy(ctx, *url, *backlog, fullSizes.rounds)
		if err != nil {
			log.Fatalf("bench: bulkcopy: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "%d ferry.noop jobs, %d paired rounds: plain COPY best %.0f/s; enqueue bulk --file best %.0f/s (median ratio %.3f, peak RSS %.0f MB); --file - from a pipe best %.0f/s (median ratio %.3f, peak RSS %.0f MB)\n",
			r.Jobs, r.Rounds, r.CopyJobsPerSec, r.FileJobsPerSec, r.FileRatio, r.FilePeakRSSMB, r.StdinJobsPerSec, r.StdinRatio, r.StdinPeakRSSMB)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "sustained":
		r, err := sustained(ctx, *url, *backlog, *dur)
		if err != nil {
			log.Fatalf("bench: sustained: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "ferry at its defaults: backlog worked at %.0f jobs/s; then %d jobs/s (reached %.0f) for %s (%d jobs): insert-to-start p99 by minute %.1f ms; last/first %s (target ≤ 1.5); river_job at the end: %d live, %d dead tuples, %.0f MB; vacuumed by the %s (%d vacuums, %d analyzes by the bench)\n",
			r.MaxJobsPerSec, r.Rate, r.Inserted, *dur, r.Jobs, r.P99ByMinute, driftText(r.Drift), r.LiveTuples, r.DeadTuples, r.TableMB, r.Autovacuum, r.Vacuums, r.Analyzes)
		fmt.Fprintf(os.Stderr, "meanwhile the server (shared_buffers %s) made %d timed and %d requested checkpoints; backends wrote %d buffers themselves, checkpoints %d\n",
			r.Server.SharedBuffers, r.Server.CheckpointsTimed, r.Server.CheckpointsReq, r.Server.BuffersBackend, r.Server.BuffersCheckpoints)
		for _, v := range r.VacuumRuns {
			fmt.Fprintf(os.Stderr, "  at %4.0f s for %5.1f s: %s\n", v.AtS, v.Seconds, v.Statement)
		}
		if r.Unstarted > 0 {
			fmt.Fprintf(os.Stderr, "FELL BEHIND: %d of %d jobs had not started two minutes after the last insert\n", r.Unstarted, r.Jobs)
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "pickup":
		p50, p99, cold, err := ferryLatency(ctx, *url, *rate, *dur, false)
		if err != nil {
			log.Fatalf("bench: pickup: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "ferry at its defaults, jobs.Inserter at %d/s for %s after a %s warm-up: insert to start p50 %.1f ms p99 %.1f ms (the warm-up's p99 %.1f ms)\n",
			*rate, *dur, warmUp, p50, p99, cold)
		if *plots != "" {
			pts, err := pickupSweep(ctx, *url, pickupRates, *dur)
			if err == nil {
				err = plotPickup(pts, *plots)
			}
			if err != nil {
				log.Fatalf("bench: pickup: %v", redact.Postgres(err.Error()))
			}
			for _, pt := range pts {
				fmt.Fprintf(os.Stderr, "%d jobs/s: p50 %.1f ms p90 %.1f ms p99 %.1f ms\n", pt.Rate, pt.P50, pt.P90, pt.P99)
			}
		}
		_ = json.NewEncoder(os.Stdout).Encode(map[string]float64{"latency_insert_to_start_p50_ms": p50, "latency_insert_to_start_p99_ms": p99, "latency_insert_to_start_cold_p99_ms": cold})
		return
	case "scaling":
		n, msgs, steps := 200_000, 50_000, 20_000
		if flagSet("backlog") {
			n = *backlog
		}
		r, err := scalingBench(ctx, *url, n, msgs, steps)
		if err != nil {
			log.Fatalf("bench: scaling: %v", redact.Postgres(err.Error()))
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "scale":
		r, err := scaleBench(ctx, *url, []int{0, 1_000_000, 5_000_000}, *backlog, *rate, *dur)
		if err != nil {
			log.Fatalf("bench: scale: %v", redact.Postgres(err.Error()))
		}
		for _, p := range r.Points {
			fmt.Fprintf(os.Stderr, "%d finished jobs (medians of %d rounds): backlog of %d worked at %.0f jobs/s (%.3f of the empty table's); pickup at %d/s p50 %.1f ms p99 %.1f ms (%.3f)\n",
				p.Finished, r.Rounds, *backlog, p.JobsPerSec, p.ThroughputRatio, *rate, p.PickupP50, p.PickupP99, p.PickupP99Ratio)
		}
		fmt.Fprintf(os.Stderr, "largest / empty, medians of the rounds' ratios: throughput %.3f (target ≥ 0.8), pickup p99 %.3f (target ≤ 1.5)\n", r.ThroughputRatio, r.PickupP99Ratio)
		if *plots != "" {
			if err := plotScale(r, *plots); err != nil {
				log.Fatalf("bench: scale: %v", err)
			}
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "counts":
		r, err := countsAtScale(ctx, *url, *backlog, 5)
		if err != nil {
			log.Fatalf("bench: counts: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "counts with %d finished jobs and 5,000 waiting, median of 5: ferry's slowest %.1f ms %v; River UI's slowest %.1f ms; /metrics first scrape %.1f ms, later %.1f ms\n",
			r.Jobs, r.ConsoleMS, r.EachMS, r.RiverUIMS, r.MetricsFirstScrapeMS, r.MetricsScrapeMS)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "riverbest":
		rounds := fullSizes.rounds
		if flagSet("trials") {
			rounds = *trials
		}
		r, err := riverBestRatio(ctx, *url, *backlog, rounds, true)
		if err != nil {
			log.Fatalf("bench: riverbest: %v", redact.Postgres(err.Error()))
		}
		p, e := r.Paired, r.InProcess
		fmt.Fprintf(os.Stderr, "backlog of %d no-op jobs, %d paired rounds: bare River at its bench settings (%d workers, %s cooldown, %s poll, River's schema) best %.0f/s; "+
			"`worker run` at its defaults (%s) best %.0f/s, median ratio %.3f of %.3f; ferry's server embedded best %.0f/s, median ratio %.3f of %.3f; end probe %.4f of the machine's CPU\n",
			*backlog, len(p.Ratios), riverBestWorkers, riverBestCooldown, riverBestPoll, p.Base, ferry.DefaultQueues, p.Other, p.Ratio(), p.Ratios, e.Other, e.Ratio(), e.Ratios, r.HarnessCPUShare)
		_ = json.NewEncoder(os.Stdout).Encode(map[string]any{"river_best_jobs_per_sec": p.Base, "ferry_default_jobs_per_sec": p.Other,
			"worker_ratio_vs_river_best": p.Ratio(), "worker_ratio_vs_river_best_rounds": p.Ratios,
			"ferry_embedded_jobs_per_sec": e.Other, "embedded_ratio_vs_river_best": e.Ratio(), "embedded_ratio_vs_river_best_rounds": e.Ratios,
			"harness_cpu_share": r.HarnessCPUShare})
		return
	case "otel":
		r, err := otelThroughput(ctx, *url, *backlog/2, 5)
		if err != nil {
			log.Fatalf("bench: otel: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "ferry worker, %d no-op jobs, 5 rounds: without traces %.0f jobs/s, every job traced and exported over OTLP/HTTP %.0f jobs/s (best of each), ratio %.3f (median of the rounds' %.3f), %d spans exported\n",
			*backlog/2, r.Off, r.On, r.Ratio, r.RoundRatios, r.Spans)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "lean":
		r, err := leanConsumers(ctx)
		if err != nil {
			log.Fatalf("bench: lean: %v", err)
		}
		fmt.Fprintf(os.Stderr, "a service inserting with jobs and outbox: %d modules, binary %.1f MB; with River and pgx alone: %d modules, %.1f MB; binary ratio %.3f\n",
			r.Modules, r.BinaryMB, r.RiverModules, r.RiverBinaryMB, r.BinaryRatio)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "pgbouncer":
		r, err := pgbouncerThroughput(ctx, *url, *backlog/2, 5, *rate, *dur, true)
		if err != nil {
			log.Fatalf("bench: pgbouncer: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "ferry worker, %d no-op jobs, 5 rounds: direct %.0f jobs/s, through PgBouncer (transaction mode) %.0f jobs/s (best of each), ratio %.3f (median of the rounds'); insert-to-start at %d/s for %s: direct p50 %.1f ms p99 %.1f ms, pooled p50 %.1f ms p99 %.1f ms\n",
			*backlog/2, r.Direct, r.Pooled, r.Ratio, *rate, r.LatencyDur, r.DirectP50, r.DirectP99, r.PooledP50, r.PooledP99)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "sealcleanup":
		r, err := sealCleanupBench(ctx, *url, *claims)
		if err != nil {
			log.Fatalf("bench: sealcleanup: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "seal claim cleanup of %d claims in %.1f s, from a checkpoint: per 100,000 deleted, %.0f ms and %.0f kB of WAL first, %.0f ms and %.0f kB last (medians of up to %d); last/first %.2f\n",
			r.Claims, r.Seconds, r.MsPer100kFirst, r.WALKBPer100kFirst, r.MsPer100kLast, r.WALKBPer100kLast, sealCleanupSpans, r.Flatness)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "bounded":
		r, err := boundedBench(ctx, *url, *backlog/10, 5)
		if err != nil {
			log.Fatalf("bench: bounded: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "jobs.Inserter, %d jobs one per transaction (8 goroutines), best of %d rounds: bounded %.0f/s, unbounded %.0f/s, without the triggers %.0f/s; bulk COPY of %d: bounded %.0f/s, unbounded %.0f/s, without the triggers %.0f/s\n",
			r.Jobs, r.Rounds, r.InsertBoundedPerSec, r.InsertUnboundedPerSec, r.InsertNoTriggersPerSec, 10*r.Jobs, r.BulkBoundedPerSec, r.BulkUnboundedPerSec, r.BulkNoTriggersPerSec)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		f, err := recountFetchBench(ctx, *url, *backlog/10)
		if err != nil {
			log.Fatalf("bench: bounded: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "bounded queue, %d fetches each way (4 goroutines): p99 %.2f ms idle, %.2f ms with %d of the recount's counts alone and %.2f ms with %d recounts, back to back; recounting / counting alone %.2f\n",
			f.Fetches, f.FetchP99MS, f.FetchP99CountsMS, f.Counts, f.FetchP99RecountsMS, f.Recounts, f.FetchP99RecountsMS/f.FetchP99CountsMS)
		_ = json.NewEncoder(os.Stdout).Encode(f)
		return
	case "ordered":
		r, err := orderedBench(ctx, *url, *keys, *perKey, 3, *trials, 0.2, *queues)
		if err != nil {
			log.Fatalf("bench: ordered: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "ordered outbox delivery, %d keys × %d messages, 3 workers (one killed with kill -9 mid-run), receiver failing %.0f%% (503, Retry-After: 1), median of %d rounds: ordered %.0f msgs/s, unordered %.0f msgs/s, ratio %.3f (rounds %.3f); order violations %d (unordered: %d), overlaps %d\n",
			r.Keys, r.PerKey, 100*r.FailShare, r.Rounds, r.OrderedPerSec, r.UnorderedPerSec, r.Ratio, r.Ratios, r.Violations, r.UnorderedViolations, r.Overlaps)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "limits-overhead":
		unlimited, limited, ratio, err := limitOverhead(ctx, *url, *backlog, *trials)
		if err != nil {
			log.Fatalf("bench: limits-overhead: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "ferry worker, %d no-op jobs, median of %d paired rounds: %.0f jobs/s without limits, %.0f under a global concurrency limit never reached: ratio %.3f\n", *backlog, *trials, unlimited, limited, ratio)
		return
	case "limits":
		r, err := limitsBench(ctx, *url, 4)
		if err != nil {
			log.Fatalf("bench: limits: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "limits, %d workers: concurrency %d with %d jobs of %.0f s: utilization %.3f, max in flight %d; rate %d/s burst %d, %d jobs, a kill: utilization %.3f, most in one second %d; chaos (%d jobs of 1 s, %d kills): max in flight %d over %d samples; violations %d\n",
			r.Workers, r.Concurrency, r.ConcurrencyJobs, r.JobSeconds, r.ConcurrencyUtilization, r.ConcurrencyMaxInFlight, r.Rate, r.Burst, r.RateJobs, r.RateUtilization, r.RateMaxInSecond, r.ChaosJobs, r.ChaosKills, r.ChaosMax, r.ChaosSamples, r.Violations)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "outbox":
		r, err := outboxBench(ctx, *url, *backlog, *rate, *dur, relayBatches)
		if err != nil {
			log.Fatalf("bench: outbox: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "outbox relay (%d messages, one route): %v msgs/s by batch size; commit to delivery start at %d msgs/s (%d messages): p50 %.1f ms p99 %.1f ms max %.1f ms; the tail (%d at or above the p99), medians: insert to relay %.1f ms, relay to fetch %.1f ms, fetch to handler %.1f ms; %d checkpoints begun meanwhile\n",
			r.RelayMessages, r.RelayMsgsPerSec, r.E2ERate, r.E2EMessages, r.E2EP50MS, r.E2EP99MS, r.E2EMaxMS, r.TailSamples, r.TailRelayMS, r.TailFetchMS, r.TailWorkMS, r.Checkpoints)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "ticks":
		r, err := tickLag(ctx, *url, *scheds, *dur, *rate)
		if err != nil {
			log.Fatalf("bench: ticks: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "tick lag (%d schedules every 1s, %d ticks, load %d jobs/s of 20ms): insert p50 %.1f ms p99 %.1f ms; start p50 %.1f ms p99 %.1f ms\n",
			r.Schedules, r.Ticks, r.LoadJobsPerSec, r.InsertP50MS, r.InsertP99MS, r.StartP50MS, r.StartP99MS)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "failover":
		if *parts < 0 {
			*parts = *trials
		}
		plan := failoverPlan{graceful: *trials, crash: *trials, demotion: *trials, partition: *parts, tick: *tick}
		if *tick == 0 {
			// At the defaults only a crash is worth its 20 s a trial.
			plan = failoverPlan{crash: *trials}
		}
		r, err := failover(ctx, *url, plan)
		if err != nil {
			log.Fatalf("bench: failover: %v", redact.Postgres(err.Error()))
		}
		line := fmt.Sprintf("failover (tick %dms, probe %dms, %d trials each):", r.TickMS, r.ProbeMS, *trials)
		if len(r.GracefulMS) > 0 {
			line += fmt.Sprintf(" graceful median %.0f ms max %.0f ms;", r.GracefulMedianMS, r.GracefulMaxMS)
		}
		line += fmt.Sprintf(" crash median %.0f ms max %.0f ms;", r.CrashMedianMS, r.CrashMaxMS)
		if len(r.DemotionMS) > 0 {
			line += fmt.Sprintf(" demotion median %.0f ms max %.0f ms;", r.DemotionMedianMS, r.DemotionMaxMS)
		}
		if len(r.PartitionMS) > 0 {
			line += fmt.Sprintf(" partition of the leader: demoted median %.0f ms max %.0f ms, next leader median %.0f ms max %.0f ms;",
				r.PartitionDemotionMedianMS, r.PartitionDemotionMaxMS, r.PartitionMedianMS, r.PartitionMaxMS)
		}
		fmt.Fprintf(os.Stderr, "%s overlaps %d; max holders seen %d\n", line, r.Overlaps, r.MaxHoldersSeen)
		if *plots != "" {
			if err := plotFailover(r, *plots); err != nil {
				log.Fatalf("bench: failover: %v", err)
			}
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "orphans":
		if *tick <= 0 {
			log.Fatalf("bench: orphans: -tick %s is not positive", *tick)
		}
		r, err := orphanRescue(ctx, *url, *trials, *orphans, *tick)
		if err != nil {
			log.Fatalf("bench: orphans: %v", redact.Postgres(err.Error()))
		}
		fmt.Fprintf(os.Stderr, "orphan rescue (kill -9 of a worker running %d jobs, tick %d ms, %d trials): every job back p50 %.0f ms p99 %.0f ms max %.0f ms (target at a 1 s tick: p99 ≤ 3 s)\n",
			r.Jobs, r.TickMS, r.Trials, r.P50MS, r.P99MS, r.MaxMS)
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	case "latency", "throughput":
		run(*mode, one)
	case "sweep":
		settings := []setting{
			{Name: "river-default", Cooldown: 100 * time.Millisecond, Poll: time.Second, Workers: 100, InsertCooldown: 100 * time.Millisecond},
			{Name: "river-default-worker", Cooldown: 100 * time.Millisecond, Poll: time.Second, Workers: 100, InsertCooldown: 5 * time.Millisecond},
			{Name: "fast-worker-slow-inserter", Cooldown: 5 * time.Millisecond, Poll: 100 * time.Millisecond, Workers: 100, InsertCooldown: 100 * time.Millisecond},
			{Name: "ferry-5ms", Cooldown: 5 * time.Millisecond, Poll: 100 * time.Millisecond, Workers: 100, InsertCooldown: 5 * time.Millisecond},
			{Name: "ferry-5ms-1ms-insert", Cooldown: 5 * time.Millisecond, Poll: 100 * time.Millisecond, Workers: 100, InsertCooldown: time.Millisecond},
			{Name: "ferry", Cooldown: ferry.DefaultFetchCooldown, Poll: ferry.DefaultFetchPollInterval, Workers: 100, InsertCooldown: jobs.InsertNotifyCooldown},
			{Name: "river-bench", Cooldown: 2 * time.Millisecond, Poll: 20 * time.Millisecond, Workers: 2000, InsertCooldown: 2 * time.Millisecond},
		}
		for _, s := range settings {
			run("latency", s)
		}
		for _, s := range settings {
			run("throughput", s)
		}
	default:
		log.Fatalf("bench: unknown mode %q", *mode)
	}
	_ = json.NewEncoder(os.Stdout).Encode(results)
}

// startServer creates a ferry server of cfg and runs it until stop, and
// returns once it has started; a server that fails before it starts is an
// error.
func startServer(ctx context.Context, cfg ferry.Config) (srv *ferry.Server, stop func(), err error) {
	srv, err = ferry.New(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	select {
	case <-srv.Started():
		return srv, func() { cancel(); <-done }, nil
	case err := <-done:
		cancel()
		return nil, nil, fmt.Errorf("server: %w", err)
	}
}

// workerLog is a real worker's logger, JSON at info, whose records are
// formatted and dropped.
func workerLog() *slog.Logger {
	return slog.New(slog.NewJSONHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// scratch creates a migrated database and returns a pool on it and a drop
// function.
func scratch(ctx context.Context, serverURL string) (*pgxpool.Pool, func(), error) {
	return scratchOf(ctx, serverURL, true)
}

// scratchOf is scratch, of an empty database unless migrated.
func scratchOf(ctx context.Context, serverURL string, migrated bool) (*pgxpool.Pool, func(), error) {
	u, drop, err := scratchdb.New(ctx, serverURL, migrated)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		_ = drop()
		return nil, nil, err
	}
	cfg.MaxConns = 40
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		_ = drop()
		return nil, nil, err
	}
	return pool, func() { pool.Close(); _ = drop() }, nil
}

func workerClient(pool *pgxpool.Pool, s setting, w *stampWorker) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     s.Cooldown,
		FetchPollInterval: s.Poll,
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: s.Workers}},
		Workers:           workers,
		Logger:            nil,
	})
}

func latency(ctx context.Context, serverURL string, s setting, rate int, dur time.Duration) (result, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return result{}, err
	}
	defer drop()
	n := int(float64(rate) * dur.Seconds())
	w := &stampWorker{done: make(chan struct{}), want: n}
	wc, err := workerClient(pool, s, w)
	if err != nil {
		return result{}, err
	}
	if err := wc.Start(ctx); err != nil {
		return result{}, err
	}
	defer func() { _ = wc.Stop(context.Background()) }()
	// A separate, insert-only client, as a Go service or the CLI would be.
	ic, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: s.InsertCooldown, FetchPollInterval: max(s.InsertCooldown, time.Second)})
	if err != nil {
		return result{}, err
	}
	time.Sleep(500 * time.Millisecond) // let producers settle
	interval := time.Second / time.Duration(rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for range n {
		<-tick.C
		if _, err := ic.Insert(ctx, stampArgs{At: time.Now().UnixNano()}, nil); err != nil {
			return result{}, err
		}
	}
	select {
	case <-w.done:
	case <-time.After(30 * time.Second):
		return result{}, fmt.Errorf("only %d of %d jobs ran", len(w.lats), n)
	}
	lats := slices.Clone(w.lats)
	slices.Sort(lats)
	return result{setting: s, Mode: "latency", Jobs: n, P50MS: ms(lats[len(lats)/2]), P99MS: ms(lats[len(lats)*99/100]), MaxMS: ms(lats[len(lats)-1])}, nil
}

func throughput(ctx context.Context, serverURL string, s setting, backlog int) (result, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return result{}, err
	}
	defer drop()
	ic, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return result{}, err
	}
	params := make([]river.InsertManyParams, 0, 10000)
	for i := 0; i < backlog; i += 10000 {
		params = params[:0]
		for j := i; j < min(i+10000, backlog); j++ {
			params = append(params, river.InsertManyParams{Args: stampArgs{At: time.Now().UnixNano()}})
		}
		if _, err := ic.InsertManyFast(ctx, params); err != nil {
			return result{}, err
		}
	}
	w := &stampWorker{done: make(chan struct{}), want: backlog}
	wc, err := workerClient(pool, s, w)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	if err := wc.Start(ctx); err != nil {
		return result{}, err
	}
	defer func() { _ = wc.Stop(context.Background()) }()
	select {
	case <-w.done:
	case <-time.After(5 * time.Minute):
		return result{}, fmt.Errorf("only %d of %d jobs ran", len(w.lats), backlog)
	}
	el := time.Since(start)
	return result{setting: s, Mode: "throughput", Jobs: backlog, JobsPerSec: float64(backlog) / el.Seconds()}, nil
}

// flagSet says whether the command line set the flag name.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
