package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
)

// sizes of one bench run: full (go tool task bench) or quick (bench:quick).
type sizes struct {
	backlog      int           // no-op jobs for the throughput comparison
	latencyDur   time.Duration // at 500 jobs/s
	relay        int           // outbox messages for the relay
	outboxDur    time.Duration // at 500 messages/s
	tickDur      time.Duration // 10 schedules every second
	trials       int           // failover trials of each kind (1 s tick)
	defTrials    int           // crash failover trials at the default settings (0: none)
	orphans      int           // orphan rescue trials (1 s tick, 100 jobs)
	bulk         int           // lines for enqueue bulk
	rounds       int           // paired rounds of the sealed, bounded and otel ratios, against River at its best, and of bulk against COPY
	pairRounds   int           // paired rounds against River at ferry's settings and through PgBouncer
	locks        int           // lock acquisitions of the fencing oracle
	lockKills    int           // kill -9 of the lock's holder, and as many pg_terminate_backend
	relayBatches []int         // the relay batch sizes measured
	sealClaims   int           // expired seal claims the leader's cleanup deletes
}

var (
	fullSizes = sizes{backlog: 200_000, latencyDur: 10 * time.Second, relay: 100_000, outboxDur: 10 * time.Second, tickDur: 15 * time.Second,
		trials: 10, defTrials: 3, orphans: 20, bulk: 1_000_000, rounds: 5, pairRounds: 3, locks: 10_000, lockKills: 10, relayBatches: relayBatches,
		sealClaims: 5_000_000}
	// quickSizes measure the full run's figures (but the scale, sustained,
	// counts, pickup-sweep and default-tick failover ones) in under three
	// minutes on a 2-core machine (total_seconds): one trial of each
	// failover at a 1 s tick, three rounds of each ratio (two against River
	// at ferry's settings and through PgBouncer), the relay at its default
	// batch and the largest.
	quickSizes = sizes{backlog: 20_000, latencyDur: 3 * time.Second, relay: 10_000, outboxDur: 3 * time.Second, tickDur: 4 * time.Second,
		trials: 1, defTrials: 0, orphans: 2, bulk: 50_000, rounds: 3, pairRounds: 2, locks: 600, lockKills: 2,
		relayBatches: []int{outbox.DefaultBatchSize, 5000}, sealClaims: 200_000}
)

// results is bench/results.json: the keys are read by tools; keep them.
type results struct {
	Rev                    string   `json:"rev"`
	CPUs                   int      `json:"cpus"`
	Date                   string   `json:"date"`
	Quick                  bool     `json:"quick"`
	WorkerRiverJobsPerSec  *float64 `json:"worker_river_jobs_per_sec"`
	WorkerFerryJobsPerSec  *float64 `json:"worker_ferry_jobs_per_sec"`
	WorkerRatio            *float64 `json:"worker_ratio"`
	RiverBestJobsPerSec    *float64 `json:"river_best_jobs_per_sec"`
	FerryDefaultJobsPerSec *float64 `json:"ferry_default_jobs_per_sec"`
	WorkerRatioVsRiverBest *float64 `json:"worker_ratio_vs_river_best"`
	// The same rounds' ferry server embedded in the bench's process
	// against the same River (where the worker process's time goes).
	EmbeddedJobsPerSec       *float64 `json:"ferry_embedded_jobs_per_sec"`
	EmbeddedRatioVsRiverBest *float64 `json:"embedded_ratio_vs_river_best"`
	// HarnessCPUShare is the share of the machine's CPU the bench's end
	// probe of a worker process takes (its process and its Postgres
	// backend), measured on a backlog as it waits, before the worker
	// starts.
	HarnessCPUShare           *float64 `json:"harness_cpu_share"`
	LatencyInsertToStartP50MS *float64 `json:"latency_insert_to_start_p50_ms"`
	LatencyInsertToStartP99MS *float64 `json:"latency_insert_to_start_p99_ms"`
	LatencyColdP99MS          *float64 `json:"latency_insert_to_start_cold_p99_ms"`
	OutboxRelayMsgsPerSec     *float64 `json:"outbox_relay_msgs_per_sec"`
	OutboxE2EP50MS            *float64 `json:"outbox_e2e_p50_ms"`
	OutboxE2EP99MS            *float64 `json:"outbox_e2e_p99_ms"`
	OutboxE2EMaxMS            *float64 `json:"outbox_e2e_max_ms"`
	OutboxE2EColdP99MS        *float64 `json:"outbox_e2e_cold_p99_ms"`
	// Ordered outbox delivery (full run only): 1,000 keys × 50 messages,
	// three workers, a kill -9, a receiver failing 20 %.
	OrderedViolations         *float64        `json:"ordered_violations"`
	OrderedThroughputRatio    *float64        `json:"ordered_throughput_ratio"`
	OrderedMsgsPerSec         *float64        `json:"ordered_msgs_per_sec"`
	UnorderedMsgsPerSec       *float64        `json:"unordered_msgs_per_sec"`
	LimitConcurrencyUtil      *float64        `json:"limit_concurrency_utilization"`
	LimitRateUtil             *float64        `json:"limit_rate_utilization"`
	LimitViolations           *float64        `json:"limit_violations"`
	LimitThroughputRatio      *float64        `json:"limit_throughput_ratio"`
	OutboxRelayLagP99MS       *float64        `json:"outbox_relay_lag_p99_ms"`
	OutboxFetchLagP99MS       *float64        `json:"outbox_fetch_lag_p99_ms"`
	OutboxTailRelayMS         *float64        `json:"outbox_tail_relay_lag_ms"`
	OutboxTailFetchMS         *float64        `json:"outbox_tail_fetch_lag_ms"`
	OutboxTailWorkMS          *float64        `json:"outbox_tail_work_lag_ms"`
	OutboxCheckpoints         *float64        `json:"outbox_checkpoints_during"`
	TickLagInsertP99MS        *float64        `json:"tick_lag_insert_p99_ms"`
	TickLagStartP99MS         *float64        `json:"tick_lag_start_p99_ms"`
	FailoverGracefulMSMedian  *float64        `json:"failover_graceful_ms_median"`
	FailoverGracefulMSMax     *float64        `json:"failover_graceful_ms_max"`
	FailoverCrashMSMedian     *float64        `json:"failover_crash_ms_median"`
	FailoverCrashMSMax        *float64        `json:"failover_crash_ms_max"`
	PartitionDemotionMSMax    *float64        `json:"partition_demotion_ms_max"`
	FailoverPartitionMSMedian *float64        `json:"failover_partition_ms_median"`
	FailoverPartitionMSMax    *float64        `json:"failover_partition_ms_max"`
	FailoverCrashDefaultMSMed *float64        `json:"failover_crash_default_ms_median"`
	FailoverCrashDefaultMSMax *float64        `json:"failover_crash_default_ms_max"`
	PgFailoverRecoveryMS      *float64        `json:"pg_failover_recovery_ms"`
	PgFailoverLostInserts     *float64        `json:"pg_failover_lost_inserts"`
	OrphanRescueMSP99         *float64        `json:"orphan_rescue_ms_p99"`
	OrphanRescueMSMax         *float64        `json:"orphan_rescue_ms_max"`
	BulkJobsPerSec            *float64        `json:"bulk_jobs_per_sec"`
	BulkCopyJobsPerSec        *float64        `json:"bulk_copy_reference_jobs_per_sec"`
	BulkRatioVsCopy           *float64        `json:"bulk_ratio_vs_copy"`
	BulkStdinRatioVsCopy      *float64        `json:"bulk_stdin_ratio_vs_copy"`
	BulkFilePeakRSSMB         *float64        `json:"bulk_file_peak_rss_mb"`
	BulkStdinPeakRSSMB        *float64        `json:"bulk_stdin_peak_rss_mb"`
	ConsoleCountsMS5M         *float64        `json:"console_counts_ms_5m"`
	SustainedP99Drift         *float64        `json:"sustained_p99_drift"`
	SustainedDeadTuples       *float64        `json:"sustained_river_job_dead_tuples"`
	SustainedTableMB          *float64        `json:"sustained_river_job_mb"`
	SustainedVacuums          *float64        `json:"sustained_bench_vacuums"`
	SustainedAutovacuum       string          `json:"sustained_autovacuum,omitempty"`
	SustainedP99ByMinute      []float64       `json:"sustained_p99_ms_by_minute,omitempty"`
	SustainedVacuumRuns       []vacuumRun     `json:"sustained_vacuum_runs,omitempty"`
	SustainedServer           *serverActivity `json:"sustained_server,omitempty"`
	SustainedMaxJobsPerSec    *float64        `json:"sustained_max_jobs_per_sec"`
	SustainedRate             *float64        `json:"sustained_rate"`
	SustainedInsertedPerSec   *float64        `json:"sustained_inserted_per_sec"`
	ScaleThroughputRatio1M    *float64        `json:"scale_throughput_ratio_1m"`
	ScalePickupP99Ratio1M     *float64        `json:"scale_pickup_p99_ratio_1m"`
	ScaleThroughputRatio5M    *float64        `json:"scale_throughput_ratio_5m"`
	ScalePickupP99Ratio5M     *float64        `json:"scale_pickup_p99_ratio_5m"`
	RiverUICountsMS5M         *float64        `json:"riverui_counts_ms_5m"`
	MetricsFirstScrapeMS5M    *float64        `json:"metrics_first_scrape_ms_5m"`
	MetricsScrapeMS5M         *float64        `json:"metrics_scrape_ms_5m"`
	WorkerPeakRSSMB           *float64        `json:"worker_peak_rss_mb"`
	OtelWorkerRatio           *float64        `json:"otel_worker_ratio"`
	OtelOffJobsPerSec         *float64        `json:"otel_off_jobs_per_sec"`
	OtelOnJobsPerSec          *float64        `json:"otel_on_jobs_per_sec"`
	LeanModules               *float64        `json:"lean_modules"`
	LeanRiverModules          *float64        `json:"lean_river_modules"`
	LeanBinaryRatio           *float64        `json:"lean_binary_ratio"`
	UnsealedWorkerJobsPerSec  *float64        `json:"unsealed_worker_jobs_per_sec"`
	SealedWorkerJobsPerSec    *float64        `json:"sealed_worker_jobs_per_sec"`
	SealedWorkerRatio         *float64        `json:"sealed_worker_ratio"`
	SealedInsertRatio         *float64        `json:"sealed_insert_ratio"`
	SealedBulkRatio           *float64        `json:"sealed_bulk_ratio"`
	// The leader's cleanup of expired seal claims (sizes.sealClaims):
	// ms per 100,000 deleted, first and last, and last / first.
	SealCleanupMsPer100kFirst *float64 `json:"seal_cleanup_ms_per_100k_first"`
	SealCleanupMsPer100kLast  *float64 `json:"seal_cleanup_ms_per_100k_last"`
	SealCleanupFlatness       *float64 `json:"seal_cleanup_flatness"`
	SealCleanupWALKBFirst     *float64 `json:"seal_cleanup_wal_kb_per_100k_first"`
	SealCleanupWALKBLast      *float64 `json:"seal_cleanup_wal_kb_per_100k_last"`
	// A bounded queue's fetch p99 (River's own fetch) without the leader's
	// recount, with recounts running one after another, and with the
	// recount's count alone running so (recountFetchResult); recounting
	// over idle (the CPU of counting, on two cores), and recounting over
	// counting alone (what the recount adds: a lock or a wait).
	BoundedFetchP99MS               *float64 `json:"bounded_fetch_p99_ms"`
	BoundedFetchP99RecountingMS     *float64 `json:"bounded_fetch_p99_recounting_ms"`
	BoundedFetchP99CountingMS       *float64 `json:"bounded_fetch_p99_counting_ms"`
	BoundedFetchRecountRatio        *float64 `json:"bounded_fetch_p99_recount_ratio"`
	BoundedFetchRecountVsCountRatio *float64 `json:"bounded_fetch_p99_recount_vs_count_ratio"`
	BoundedInsertRatio              *float64 `json:"bounded_insert_ratio"`
	BoundedBulkRatio                *float64 `json:"bounded_bulk_ratio"`
	TriggerInsertRatio              *float64 `json:"unbounded_trigger_insert_ratio"`
	TriggerBulkRatio                *float64 `json:"unbounded_trigger_bulk_ratio"`
	PgBouncerWorkerRatio            *float64 `json:"pgbouncer_worker_ratio"`
	PgBouncerLatencyP50MS           *float64 `json:"pgbouncer_latency_insert_to_start_p50_ms"`
	PgBouncerLatencyP99MS           *float64 `json:"pgbouncer_latency_insert_to_start_p99_ms"`
	BroadcastP99MS                  *float64 `json:"broadcast_p99_ms"`
	BroadcastMsgsPerSec             *float64 `json:"broadcast_msgs_per_sec"`
	// Workflows (-mode workflow) and priority aging (-mode aging): full
	// runs only.
	WorkflowStepRatio    *float64 `json:"workflow_step_ratio"`
	WorkflowInsertRatio  *float64 `json:"workflow_insert_ratio"`
	WorkflowFanInP99MS   *float64 `json:"workflow_fanin_ms_p99"`
	WorkflowFanInP50MS   *float64 `json:"workflow_fanin_ms_p50"`
	AgingMaxWaitMS       *float64 `json:"aging_max_wait_ms"`
	AgingOffLowStarted   *float64 `json:"aging_off_low_started"`
	AgingThroughputRatio *float64 `json:"aging_throughput_ratio"`
	// A rate limit of 100/s over 1,000,000 waiting jobs (-mode
	// limits-backlog): full runs only.
	LimitWaitWritesPerStart     *float64 `json:"limit_wait_writes_per_start"`
	LimitWaitDBCPUPerStartMS    *float64 `json:"limit_wait_db_cpu_ms_per_start"`
	LimitWaitDBCPURatio         *float64 `json:"limit_wait_db_cpu_ratio"`
	LimitRateUtilizationBacklog *float64 `json:"limit_rate_utilization_backlog"`
	// Weighted fairness across a queue's keys (-mode fairness): full
	// runs only.
	FairShareErrorMax      *float64          `json:"fair_share_error_max"`
	FairQuietPickupP99MS   *float64          `json:"fair_quiet_key_pickup_p99_ms"`
	FairQuietBaselineP99MS *float64          `json:"fair_quiet_baseline_p99_ms"`
	FairQuietPickupRatio   *float64          `json:"fair_quiet_key_pickup_ratio"`
	FairFetchRatio         *float64          `json:"fair_fetch_ratio"`
	Notes                  map[string]string `json:"notes"`
	// StepSeconds is how long each step of the run took, by the name it
	// prints; TotalSeconds the whole run's (bench:quick's target: 180).
	StepSeconds  map[string]float64 `json:"step_seconds"`
	TotalSeconds float64            `json:"total_seconds"`
	// Server is the settings of the Postgres server that shape the
	// figures (serverSettings): without autovacuum, say, river_job keeps
	// every dead row of a long run.
	Server map[string]string `json:"server"`
	// The paired rounds' own ratios, in the order they ran, of the six
	// ratios that are their median.
	WorkerRatioRounds              []float64 `json:"worker_ratio_rounds,omitempty"`
	WorkerRatioVsRiverBestRounds   []float64 `json:"worker_ratio_vs_river_best_rounds,omitempty"`
	EmbeddedRatioVsRiverBestRounds []float64 `json:"embedded_ratio_vs_river_best_rounds,omitempty"`
	OtelWorkerRatioRounds          []float64 `json:"otel_worker_ratio_rounds,omitempty"`
	SealedWorkerRatioRounds        []float64 `json:"sealed_worker_ratio_rounds,omitempty"`
	BulkRatioVsCopyRounds          []float64 `json:"bulk_ratio_vs_copy_rounds,omitempty"`
	BulkStdinRatioVsCopyRounds     []float64 `json:"bulk_stdin_ratio_vs_copy_rounds,omitempty"`
	// TargetsMissed are the keys of the figures that missed their targets
	// in this run, and TargetsUnmeasured those of the figures with a target
	// that the run has not (a quick run leaves steps out; a step that
	// failed has a note): the table's verdicts, for a tool.
	TargetsMissed     []string `json:"targets_missed"`
	TargetsUnmeasured []string `json:"targets_unmeasured"`
	lockResults
}

func ptr(f float64) *float64 { return &f }

// runAll measures everything, side by side in one run, writes path and
// prints a table.
func runAll(ctx context.Context, serverURL, path string, quick bool) error {
	sz := fullSizes
	if quick {
		sz = quickSizes
	}
	began := time.Now()
	res := results{CPUs: runtime.NumCPU(), Date: began.UTC().Format(time.RFC3339), Quick: quick, Notes: map[string]string{}, StepSeconds: map[string]float64{}}
	if out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output(); err == nil {
		res.Rev = strings.TrimSpace(string(out))
	} else {
		res.Rev = "unknown"
	}
	note := func(key string, err error) {
		res.Notes[key] = err.Error()
		fmt.Fprintf(os.Stderr, "bench: %s: %v\n", key, err)
	}
	var err error
	if res.Server, err = serverSettings(ctx, serverURL); err != nil {
		return err
	}
	// step starts the step name, and ends the one before (its time in
	// StepSeconds and on stderr).
	var current string
	stepAt := began
	step := func(name string) {
		if current != "" {
			res.StepSeconds[current] = time.Since(stepAt).Seconds()
			fmt.Fprintf(os.Stderr, "bench: %s: %.1f s\n", current, time.Since(stepAt).Seconds())
		}
		current, stepAt = name, time.Now()
		if name != "" {
			fmt.Fprintf(os.Stderr, "bench: %s …\n", name)
		}
	}

	step("worker throughput, bare River at ferry's settings against ferry, paired rounds")
	if p, err := workerThroughput(ctx, serverURL, sz.backlog, sz.pairRounds); err != nil {
		note("worker", err)
	} else {
		res.WorkerRiverJobsPerSec, res.WorkerFerryJobsPerSec, res.WorkerRatio = ptr(p.Base), ptr(p.Other), ptr(p.Ratio())
		res.WorkerRatioRounds = p.Ratios
	}
	step("worker throughput, bare River at River's own bench settings against ferry's defaults, paired rounds")
	if r, err := riverBestRatio(ctx, serverURL, sz.backlog, sz.rounds, true); err != nil {
		note("worker_river_best", err)
	} else {
		p := r.Paired
		res.RiverBestJobsPerSec, res.FerryDefaultJobsPerSec, res.WorkerRatioVsRiverBest = ptr(p.Base), ptr(p.Other), ptr(p.Ratio())
		res.WorkerRatioVsRiverBestRounds = p.Ratios
		res.EmbeddedJobsPerSec, res.EmbeddedRatioVsRiverBest = ptr(r.InProcess.Other), ptr(r.InProcess.Ratio())
		res.EmbeddedRatioVsRiverBestRounds = r.InProcess.Ratios
		res.HarnessCPUShare = ptr(r.HarnessCPUShare)
	}
	step("worker throughput, ferry without then with every job traced")
	if r, err := otelThroughput(ctx, serverURL, sz.backlog/2, sz.rounds); err != nil {
		note("otel", err)
	} else {
		res.OtelWorkerRatio, res.OtelOffJobsPerSec, res.OtelOnJobsPerSec = ptr(r.Ratio), ptr(r.Off), ptr(r.On)
		res.OtelWorkerRatioRounds = r.RoundRatios
	}
	step("worker throughput, ferry without then with seal keys")
	if r, err := sealedThroughput(ctx, serverURL, sz.backlog/2, sz.rounds); err != nil {
		note("sealed", err)
	} else {
		res.UnsealedWorkerJobsPerSec, res.SealedWorkerJobsPerSec, res.SealedWorkerRatio = ptr(r.Unsealed), ptr(r.Sealed), ptr(r.Ratio)
		res.SealedWorkerRatioRounds = r.RoundRatios
		res.SealedInsertRatio, res.SealedBulkRatio = ptr(r.InsertRatio), ptr(r.BulkRatio)
	}
	step("seal claim cleanup, time per 100,000 deleted")
	if r, err := sealCleanupBench(ctx, serverURL, sz.sealClaims); err != nil {
		note("seal_cleanup", err)
	} else {
		res.SealCleanupMsPer100kFirst, res.SealCleanupMsPer100kLast, res.SealCleanupFlatness = ptr(r.MsPer100kFirst), ptr(r.MsPer100kLast), ptr(r.Flatness)
		res.SealCleanupWALKBFirst, res.SealCleanupWALKBLast = ptr(r.WALKBPer100kFirst), ptr(r.WALKBPer100kLast)
	}
	step("insert-to-start latency at 500 jobs/s")
	if p50, p99, cold, err := ferryLatency(ctx, serverURL, 500, sz.latencyDur, false); err != nil {
		note("latency", err)
	} else {
		res.LatencyInsertToStartP50MS, res.LatencyInsertToStartP99MS = ptr(p50), ptr(p99)
		res.LatencyColdP99MS = ptr(cold)
	}
	if !quick {
		step("insert-to-start latency against the insert rate")
		if pts, err := pickupSweep(ctx, serverURL, pickupRates, sz.latencyDur); err != nil {
			note("pickup_sweep", err)
		} else if err := plotPickup(pts, plotsDir); err != nil {
			note("plot_pickup", err)
		}
	}
	step("worker through PgBouncer in transaction mode against direct")
	if r, err := pgbouncerThroughput(ctx, serverURL, sz.backlog/2, sz.pairRounds, 500, sz.latencyDur, false); err != nil {
		note("pgbouncer", err)
	} else {
		res.PgBouncerWorkerRatio = ptr(r.Ratio)
		res.PgBouncerLatencyP50MS, res.PgBouncerLatencyP99MS = ptr(r.PooledP50), ptr(r.PooledP99)
	}
	step("outbox")
	if r, err := outboxBench(ctx, serverURL, sz.relay, 500, sz.outboxDur, sz.relayBatches); err != nil {
		note("outbox", err)
	} else {
		res.OutboxRelayMsgsPerSec, res.OutboxE2EP50MS, res.OutboxE2EP99MS = ptr(r.BestRelayPerSec), ptr(r.E2EP50MS), ptr(r.E2EP99MS)
		res.OutboxE2EMaxMS, res.OutboxRelayLagP99MS, res.OutboxFetchLagP99MS = ptr(r.E2EMaxMS), ptr(r.RelayLagP99MS), ptr(r.FetchLagP99MS)
		res.OutboxE2EColdP99MS = ptr(r.E2EColdP99MS)
		res.OutboxTailRelayMS, res.OutboxTailFetchMS, res.OutboxTailWorkMS = ptr(r.TailRelayMS), ptr(r.TailFetchMS), ptr(r.TailWorkMS)
		res.OutboxCheckpoints = ptr(float64(r.Checkpoints))
	}
	if !quick {
		// Two runs of 50,000 messages through real workers: two and a
		// half minutes, the full run only.
		step("ordered outbox delivery against unordered")
		if r, err := orderedBench(ctx, serverURL, 1000, 50, 3, 1, 0.2, ""); err != nil {
			note("ordered", err)
		} else {
			res.OrderedViolations, res.OrderedThroughputRatio = ptr(float64(r.Violations)), ptr(r.Ratio)
			res.OrderedMsgsPerSec, res.UnorderedMsgsPerSec = ptr(r.OrderedPerSec), ptr(r.UnorderedPerSec)
		}
	}
	if !quick {
		// Three runs of four workers (25 s, 20 s, about 20 s): the full
		// run only.
		step("concurrency and rate limits")
		if r, err := limitsBench(ctx, serverURL, 4); err != nil {
			note("limits", err)
		} else {
			res.LimitConcurrencyUtil, res.LimitRateUtil = ptr(r.ConcurrencyUtilization), ptr(r.RateUtilization)
			res.LimitViolations = ptr(float64(r.Violations))
		}
		if _, _, ratio, err := limitOverhead(ctx, serverURL, 20000, 3); err != nil {
			note("limits overhead", err)
		} else {
			res.LimitThroughputRatio = ptr(ratio)
		}
	}
	step("scheduler tick lag")
	if r, err := tickLag(ctx, serverURL, 10, sz.tickDur, 500); err != nil {
		note("ticks", err)
	} else {
		res.TickLagInsertP99MS, res.TickLagStartP99MS = ptr(r.InsertP99MS), ptr(r.StartP99MS)
	}
	step("failover")
	if r, err := failover(ctx, serverURL, failoverPlan{graceful: sz.trials, crash: sz.trials, demotion: sz.trials, partition: sz.trials, tick: failoverTick}); err != nil {
		note("failover", err)
	} else {
		res.FailoverGracefulMSMedian, res.FailoverGracefulMSMax = ptr(r.GracefulMedianMS), ptr(r.GracefulMaxMS)
		res.FailoverCrashMSMedian, res.FailoverCrashMSMax = ptr(r.CrashMedianMS), ptr(r.CrashMaxMS)
		res.PartitionDemotionMSMax = ptr(r.PartitionDemotionMaxMS)
		res.FailoverPartitionMSMedian, res.FailoverPartitionMSMax = ptr(r.PartitionMedianMS), ptr(r.PartitionMaxMS)
		if r.Overlaps > 0 {
			note("failover_overlaps", fmt.Errorf("%d overlaps observed", r.Overlaps))
		}
		if !quick {
			if err := plotFailover(r, plotsDir); err != nil {
				note("plot_failover", err)
			}
		}
	}
	// At the default tick (1.5 s) a takeover takes about 2.3 s whatever
	// the size: the full run only (quick's defTrials is 0).
	if sz.defTrials > 0 {
		step("crash failover at the default settings")
		if r, err := failover(ctx, serverURL, failoverPlan{crash: sz.defTrials}); err != nil {
			note("failover_default", err)
		} else {
			res.FailoverCrashDefaultMSMed, res.FailoverCrashDefaultMSMax = ptr(r.CrashMedianMS), ptr(r.CrashMaxMS)
			if r.Overlaps > 0 {
				note("failover_default_overlaps", fmt.Errorf("%d overlaps observed", r.Overlaps))
			}
		}
	}
	step("Postgres primary failover: the primary crashed under load, its synchronous standby promoted")
	if r, err := pgFailover(ctx, min(sz.trials, 5), 0); err != nil {
		note("pg_failover", err)
	} else {
		res.PgFailoverRecoveryMS, res.PgFailoverLostInserts = ptr(r.RecoveryMaxMS), ptr(float64(r.Lost))
	}
	step("orphan rescue: kill -9 of a worker running 100 jobs, 1 s tick")
	if r, err := orphanRescue(ctx, serverURL, sz.orphans, 100, time.Second); err != nil {
		note("orphans", err)
	} else {
		res.OrphanRescueMSP99, res.OrphanRescueMSMax = ptr(r.P99MS), ptr(r.MaxMS)
	}
	step("bounded queues: inserts and bulk with a bound, without, and without the triggers")
	if r, err := boundedBench(ctx, serverURL, sz.backlog/20, sz.rounds); err != nil {
		note("bounded", err)
	} else {
		res.BoundedInsertRatio, res.BoundedBulkRatio = ptr(r.BoundedInsertRatio), ptr(r.BoundedBulkRatio)
		res.TriggerInsertRatio, res.TriggerBulkRatio = ptr(r.UnboundedTriggerInsertCost), ptr(r.UnboundedTriggerBulkCost)
	}
	step("bounded queues: River's fetch p99 idle, with the recount's count alone and with recounts, back to back")
	if r, err := recountFetchBench(ctx, serverURL, sz.backlog/20); err != nil {
		note("bounded_fetch", err)
	} else {
		res.BoundedFetchP99MS, res.BoundedFetchP99RecountingMS = ptr(r.FetchP99MS), ptr(r.FetchP99RecountsMS)
		res.BoundedFetchP99CountingMS = ptr(r.FetchP99CountsMS)
		if r.FetchP99MS > 0 {
			res.BoundedFetchRecountRatio = ptr(r.FetchP99RecountsMS / r.FetchP99MS)
		}
		if r.FetchP99CountsMS > 0 {
			res.BoundedFetchRecountVsCountRatio = ptr(r.FetchP99RecountsMS / r.FetchP99CountsMS)
		}
	}
	if !quick {
		step("workflows: a 10,000-step layered DAG and its insert against plain jobs, paired rounds; fan-in after 1,000 dependencies")
		if r, err := workflowBench(ctx, serverURL, 10_000, sz.rounds, 100); err != nil {
			note("workflow", err)
		} else {
			res.WorkflowStepRatio, res.WorkflowInsertRatio = ptr(r.StepRatio), ptr(r.InsertRatio)
			res.WorkflowFanInP99MS, res.WorkflowFanInP50MS = ptr(r.FanInP99MS), ptr(r.FanInP50MS)
		}
		step("a rate limit of 100/s over 1,000,000 waiting jobs, then over 1,000")
		if r, err := limitBacklogBench(ctx, serverURL, 1_000_000, 1000, 100, time.Minute); err != nil {
			note("limits_backlog", err)
		} else {
			res.LimitWaitWritesPerStart, res.LimitWaitDBCPUPerStartMS = r.WritesPerStart, r.DBCPUPerStartMS
			res.LimitWaitDBCPURatio, res.LimitRateUtilizationBacklog = r.DBCPURatio, ptr(r.Utilization)
		}
		step("weighted fairness: shares of keys 1:2:7; a quiet key under a 500,000-job flood; no-op jobs over 10,000 keys with it / without")
		var latP99 float64
		if res.LatencyInsertToStartP99MS != nil {
			latP99 = *res.LatencyInsertToStartP99MS
		}
		if r, err := fairnessBench(ctx, serverURL, fairnessFull, latP99); err != nil {
			note("fairness", err)
		} else {
			res.FairShareErrorMax, res.FairFetchRatio = ptr(r.ShareErrorMax), ptr(r.FetchRatio)
			res.FairQuietPickupP99MS, res.FairQuietBaselineP99MS, res.FairQuietPickupRatio = ptr(r.QuietP99), ptr(r.BaseP99), ptr(r.QuietRatio)
		}
		step("priority aging: priority-4 jobs under a flood of priority-1 jobs, aging of 10 s, then off")
		if r, err := agingBench(ctx, serverURL, 10*time.Second, 30*time.Second); err != nil {
			note("aging", err)
		} else {
			res.AgingMaxWaitMS, res.AgingOffLowStarted, res.AgingThroughputRatio = ptr(r.MaxWaitMS), ptr(float64(r.OffStarted)), ptr(r.ThroughputRatio)
		}
	}
	step("broadcast: 1,000 signed messages/s to 3 subscriber processes")
	if r, err := broadcastBench(ctx, serverURL, 3, 1000, sz.latencyDur); err != nil {
		note("broadcast", err)
	} else {
		res.BroadcastP99MS, res.BroadcastMsgsPerSec = ptr(r.P99MS), ptr(r.MsgsPerSec)
		if lost := 3*r.Published - sum(r.Received); lost != 0 {
			res.Notes["broadcast"] = fmt.Sprintf("%d of %d deliveries missing (gaps %v)", lost, 3*r.Published, r.Gaps)
		}
	}
	step("locks: 16 processes, fencing oracle with kill -9 and pg_terminate_backend of the holder")
	if r, err := lockStep(ctx, serverURL, sz.locks, sz.lockKills); err != nil {
		note("locks", err)
	} else {
		res.lockResults = r
		if *r.LockOverlaps > 0 {
			note("lock_overlaps", fmt.Errorf("%.0f overlaps observed", *r.LockOverlaps))
		}
	}
	step("bulk enqueue against a plain COPY")
	if r, err := bulkVsCopy(ctx, serverURL, sz.bulk, sz.rounds); err != nil {
		note("bulk", err)
	} else {
		res.BulkJobsPerSec, res.BulkCopyJobsPerSec = ptr(r.FileJobsPerSec), ptr(r.CopyJobsPerSec)
		res.BulkRatioVsCopy, res.BulkStdinRatioVsCopy = ptr(r.FileRatio), ptr(r.StdinRatio)
		res.BulkRatioVsCopyRounds, res.BulkStdinRatioVsCopyRounds = r.FileRatioRounds, r.StdinRatioRounds
		res.BulkFilePeakRSSMB, res.BulkStdinPeakRSSMB = ptr(r.FilePeakRSSMB), ptr(r.StdinPeakRSSMB)
	}
	if !quick {
		// Five million jobs take a minute to write: the full run only.
		step("ferry's worker with 0, 1 and 5 million finished jobs in river_job")
		if r, err := scaleBench(ctx, serverURL, []int{0, 1_000_000, 5_000_000}, 50_000, 500, 10*time.Second); err != nil {
			note("scale", err)
		} else {
			if err := plotScale(r, plotsDir); err != nil {
				note("plot_scale", err)
			}
			one, five := r.Points[1], r.Points[2]
			res.ScaleThroughputRatio1M, res.ScalePickupP99Ratio1M = ptr(one.ThroughputRatio), ptr(one.PickupP99Ratio)
			res.ScaleThroughputRatio5M, res.ScalePickupP99Ratio5M = ptr(five.ThroughputRatio), ptr(five.PickupP99Ratio)
		}
		step("ten minutes at half the maximum")
		if r, err := sustained(ctx, serverURL, 50_000, 10*time.Minute); err != nil {
			note("sustained", err)
		} else {
			res.SustainedP99Drift, res.SustainedDeadTuples, res.SustainedTableMB = r.Drift, ptr(float64(r.DeadTuples)), ptr(r.TableMB)
			res.SustainedAutovacuum, res.SustainedVacuums = r.Autovacuum, ptr(float64(r.Vacuums))
			res.SustainedP99ByMinute, res.SustainedVacuumRuns, res.SustainedServer = r.P99ByMinute, r.VacuumRuns, &r.Server
			// The load the drift was measured under: the maximum, half of
			// it asked, and the rate the producer reached.
			res.SustainedMaxJobsPerSec, res.SustainedRate, res.SustainedInsertedPerSec = ptr(r.MaxJobsPerSec), ptr(float64(r.Rate)), ptr(r.Inserted)
			if r.Unstarted > 0 {
				note("sustained", fmt.Errorf("fell behind: %d of %d jobs had not started two minutes after the last insert", r.Unstarted, r.Jobs))
			}
		}
		step("counts with 5 million finished jobs")
		if r, err := countsAtScale(ctx, serverURL, 5_000_000, 5); err != nil {
			note("counts", err)
		} else {
			res.ConsoleCountsMS5M, res.RiverUICountsMS5M = ptr(r.ConsoleMS), ptr(r.RiverUIMS)
			res.MetricsFirstScrapeMS5M, res.MetricsScrapeMS5M = ptr(r.MetricsFirstScrapeMS), ptr(r.MetricsScrapeMS)
		}
	}
	step("worker peak RSS")
	if mb, err := workerPeakRSS(ctx, serverURL, sz.backlog/2); err != nil {
		note("rss", err)
	} else {
		res.WorkerPeakRSSMB = ptr(mb)
	}

	if !quick {
		step("a service's modules and binary: ferry's writer packages against River alone")
		if r, err := leanConsumers(ctx); err != nil {
			note("lean", err)
		} else {
			res.LeanModules, res.LeanRiverModules, res.LeanBinaryRatio = ptr(float64(r.Modules)), ptr(float64(r.RiverModules)), ptr(r.BinaryRatio)
		}
	}

	step("")
	res.TotalSeconds = time.Since(began).Seconds()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	rows := tableRows(res)
	res.TargetsMissed, res.TargetsUnmeasured = checkTargets(rows)
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return err
	}
	printTable(rows, res.TargetsMissed, res.TargetsUnmeasured, res.Notes, quick)
	fmt.Fprintf(os.Stderr, "bench: wrote %s\n", path)
	return nil
}

// tableRow is a row of the table runAll prints: a figure v in unit (or
// text, when the row shows several), the target as printed and, where the
// target is a bound, the bound itself and the figure's key in
// bench/results.json.
type tableRow struct {
	label  string
	v      *float64
	unit   string
	text   string
	target string
	key    string
	goal   *goal
}

// goal is a bound a figure must keep: at most, at least or above limit
// (op "≤", "≥" or ">").
type goal struct {
	op    string
	limit float64
}

func atMost(limit float64) *goal  { return &goal{"≤", limit} }
func atLeast(limit float64) *goal { return &goal{"≥", limit} }
func above(limit float64) *goal   { return &goal{">", limit} }

// twiceAtMost is at most twice base: no figure meets it while base is
// not measured.
func twiceAtMost(base *float64) *goal {
	if base == nil {
		return atMost(math.Inf(-1))
	}
	return atMost(2 * *base)
}

func (g goal) met(v float64) bool {
	switch g.op {
	case "≤":
		return v <= g.limit
	case "≥":
		return v >= g.limit
	}
	return v > g.limit
}

// format prints a figure: one without a unit (a ratio, a count) to three
// decimals, so that 0.943 against a target of 0.97 does not read 0.9, or
// whole when it is whole; one with a unit to one decimal.
func format(v *float64, unit string) string {
	switch {
	case v == nil:
		return "null"
	case unit != "":
		return strconv.FormatFloat(*v, 'f', 1, 64) + " " + unit
	case *v == math.Trunc(*v):
		return strconv.FormatFloat(*v, 'f', 0, 64)
	}
	return strconv.FormatFloat(*v, 'f', 3, 64)
}

// The verdicts of a row with a goal.
const (
	verdictMet        = "met"
	verdictMissed     = "MISSED"
	verdictUnmeasured = "not measured"
)

// verdict is the row's verdict on its goal, "" for a row without one.
func (row tableRow) verdict() string {
	switch {
	case row.goal == nil:
		return ""
	case row.v == nil:
		return verdictUnmeasured
	case row.goal.met(*row.v):
		return verdictMet
	}
	return verdictMissed
}

// checkTargets reads every row with a goal: the keys of the figures that
// missed it, and of those without a figure (a step a quick run leaves
// out, or one that failed: its note says why). Both are empty, not nil,
// when there is none, so that the file says [] rather than null.
func checkTargets(rows []tableRow) (missed, unmeasured []string) {
	missed, unmeasured = []string{}, []string{}
	for _, row := range rows {
		switch row.verdict() {
		case verdictMissed:
			missed = append(missed, row.key)
		case verdictUnmeasured:
			unmeasured = append(unmeasured, row.key)
		}
	}
	return missed, unmeasured
}

// printTable prints rows, each target's verdict (met, MISSED, or not
// measured), a line that counts them with the keys checkTargets found
// missed and unmeasured, and the run's notes.
func printTable(rows []tableRow, missed, unmeasured []string, notes map[string]string, quick bool) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "figure\tvalue\ttarget\t\n")
	met := 0
	for _, row := range rows {
		v := row.verdict()
		if v == verdictMet {
			met++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", row.label, cmp.Or(row.text, format(row.v, row.unit)), row.target, v)
	}
	_ = tw.Flush()
	fmt.Printf("targets: %d met, %d missed %v, %d not measured %v\n", met, len(missed), missed, len(unmeasured), unmeasured)
	if quick {
		fmt.Println("targets: the targets are the full run's (go tool task bench); a quick run's smaller samples and fewer rounds move its ratios further")
	}
	for _, k := range slices.Sorted(mapsKeys(notes)) {
		fmt.Printf("note %s: %s\n", k, notes[k])
	}
}

// tableRows is the table of r: every figure with a target, and those that
// explain them.
func tableRows(r results) []tableRow {
	f := format
	return []tableRow{
		{label: "worker jobs/s, bare River", v: r.WorkerRiverJobsPerSec, unit: "/s"},
		{label: "worker jobs/s, ferry", v: r.WorkerFerryJobsPerSec, unit: "/s"},
		{label: "worker ratio ferry / River", v: r.WorkerRatio, target: "≥ 0.9", key: "worker_ratio", goal: atLeast(0.9)},
		{label: "worker jobs/s, River at its bench settings (2,000 workers, 2 ms, 20 ms)", v: r.RiverBestJobsPerSec, unit: "/s"},
		{label: "worker jobs/s, `worker run` process at its defaults", v: r.FerryDefaultJobsPerSec, unit: "/s"},
		{label: "worker ratio `worker run` process / River at its best", v: r.WorkerRatioVsRiverBest, target: "≥ 0.95", key: "worker_ratio_vs_river_best", goal: atLeast(0.95)},
		{label: "worker jobs/s, ferry's server embedded in the bench", v: r.EmbeddedJobsPerSec, unit: "/s"},
		{label: "worker ratio embedded server / River at its best", v: r.EmbeddedRatioVsRiverBest, target: "measured (no target)"},
		{label: "the bench's end probe: share of the machine's CPU", v: r.HarnessCPUShare, target: "≤ 0.01", key: "harness_cpu_share", goal: atMost(0.01)},
		{label: "worker jobs/s, ferry sealed", v: r.SealedWorkerJobsPerSec, unit: "/s"},
		{label: "sealed / unsealed worker ratio", v: r.SealedWorkerRatio, target: "≥ 0.9", key: "sealed_worker_ratio", goal: atLeast(0.9)},
		{label: "seal claim cleanup, ms per 100,000 deleted, first", v: r.SealCleanupMsPer100kFirst, unit: "ms"},
		{label: "seal claim cleanup, ms per 100,000 deleted, last", v: r.SealCleanupMsPer100kLast, unit: "ms"},
		{label: "seal claim cleanup, last / first 100,000", v: r.SealCleanupFlatness, target: "≤ 1.5", key: "seal_cleanup_flatness", goal: atMost(1.5)},
		{label: "seal claim cleanup, WAL kB per 100,000 deleted, first", v: r.SealCleanupWALKBFirst, unit: "kB"},
		{label: "seal claim cleanup, WAL kB per 100,000 deleted, last", v: r.SealCleanupWALKBLast, unit: "kB"},
		{label: "insert to start p50", v: r.LatencyInsertToStartP50MS, unit: "ms", target: "≤ 5 ms", key: "latency_insert_to_start_p50_ms", goal: atMost(5)},
		{label: "insert to start p99 (after a 2 s warm-up)", v: r.LatencyInsertToStartP99MS, unit: "ms", target: "≤ 10 ms", key: "latency_insert_to_start_p99_ms", goal: atMost(10)},
		{label: "insert to start p99, the warm-up (a server's first 2 s)", v: r.LatencyColdP99MS, unit: "ms"},
		{label: "worker through PgBouncer / direct", v: r.PgBouncerWorkerRatio, target: "measured (no target)"},
		{label: "insert to start p50 through PgBouncer", v: r.PgBouncerLatencyP50MS, unit: "ms", target: "≈ River's 1 s poll"},
		{label: "insert to start p99 through PgBouncer", v: r.PgBouncerLatencyP99MS, unit: "ms"},
		{label: "outbox relay", v: r.OutboxRelayMsgsPerSec, unit: "msgs/s", target: "≥ 10,000/s", key: "outbox_relay_msgs_per_sec", goal: atLeast(10_000)},
		{label: "outbox commit to delivery p50", v: r.OutboxE2EP50MS, unit: "ms", target: "≤ 10 ms", key: "outbox_e2e_p50_ms", goal: atMost(10)},
		{label: "outbox commit to delivery p99 (after a 2 s warm-up)", v: r.OutboxE2EP99MS, unit: "ms", target: "≤ 25 ms", key: "outbox_e2e_p99_ms", goal: atMost(25)},
		{label: "outbox commit to delivery p99, the warm-up (a server's first 2 s)", v: r.OutboxE2EColdP99MS, unit: "ms"},
		{label: "outbox commit to delivery max", v: r.OutboxE2EMaxMS, unit: "ms"},
		{label: "outbox insert to relay transaction p99", v: r.OutboxRelayLagP99MS, unit: "ms", target: "measured"},
		{label: "outbox relay transaction to delivery fetch p99", v: r.OutboxFetchLagP99MS, unit: "ms", target: "measured"},
		{label: "outbox tail (≥ p99), medians: insert to relay / relay to fetch / fetch to handler; checkpoints begun meanwhile", text: fmt.Sprintf("%s / %s / %s; %s", f(r.OutboxTailRelayMS, "ms"), f(r.OutboxTailFetchMS, "ms"), f(r.OutboxTailWorkMS, "ms"), f(r.OutboxCheckpoints, "")), target: "measured"},
		{label: "ordered outbox delivery: order violations (1,000 keys × 50, kill -9, 20 % failures)", v: r.OrderedViolations, target: "0", key: "ordered_violations", goal: atMost(0)},
		{label: "ordered / unordered outbox delivery throughput", v: r.OrderedThroughputRatio, target: "≥ 0.8", key: "ordered_throughput_ratio", goal: atLeast(0.8)},
		{label: "concurrency limit 20, jobs of 5 s, 4 workers: utilization", v: r.LimitConcurrencyUtil, target: "≥ 0.85", key: "limit_concurrency_utilization", goal: atLeast(0.85)},
		{label: "rate limit 10/s under backlog, 4 workers, a kill: utilization", v: r.LimitRateUtil, target: "≥ 0.95", key: "limit_rate_utilization", goal: atLeast(0.95)},
		{label: "limit violations (50 ms samples over the concurrency, kills; 1 s windows over rate + burst)", v: r.LimitViolations, target: "0", key: "limit_violations", goal: atMost(0)},
		{label: "no-op jobs under a global concurrency limit never reached / none", v: r.LimitThroughputRatio, target: "≥ 0.9 (River #1145: half)", key: "limit_throughput_ratio", goal: atLeast(0.9)},
		{label: "fairness 1:2:7, 100,000 jobs each, 30 s: largest relative error of a key's share", v: r.FairShareErrorMax, target: "≤ 0.05", key: "fair_share_error_max", goal: atMost(0.05)},
		{label: "fairness: a quiet key's insert to start p99 (5/s) under another's 500,000-job flood", v: r.FairQuietPickupP99MS, unit: "ms", target: "≤ 2 × the same without flood or fairness", key: "fair_quiet_key_pickup_p99_ms", goal: twiceAtMost(r.FairQuietBaselineP99MS)},
		{label: "fairness: the quiet key's p99 without flood or fairness (5/s)", v: r.FairQuietBaselineP99MS, unit: "ms"},
		{label: "fairness: no-op jobs over 10,000 keys with fairness / without", v: r.FairFetchRatio, target: "≥ 0.85", key: "fair_fetch_ratio", goal: atLeast(0.85)},
		{label: "tick lag to insert p99", v: r.TickLagInsertP99MS, unit: "ms", target: "≤ 50 ms", key: "tick_lag_insert_p99_ms", goal: atMost(50)},
		{label: "tick lag to start p99", v: r.TickLagStartP99MS, unit: "ms", target: "≤ 100 ms", key: "tick_lag_start_p99_ms", goal: atMost(100)},
		{label: "graceful failover median", v: r.FailoverGracefulMSMedian, unit: "ms", target: "≤ 1 s", key: "failover_graceful_ms_median", goal: atMost(1000)},
		{label: "graceful failover max", v: r.FailoverGracefulMSMax, unit: "ms", target: "≤ 1 s", key: "failover_graceful_ms_max", goal: atMost(1000)},
		{label: "crash failover median", v: r.FailoverCrashMSMedian, unit: "ms", target: "≤ 3 s", key: "failover_crash_ms_median", goal: atMost(3000)},
		{label: "crash failover max", v: r.FailoverCrashMSMax, unit: "ms", target: "≤ 3 s", key: "failover_crash_ms_max", goal: atMost(3000)},
		{label: "partitioned leader demoted, max (1 s tick)", v: r.PartitionDemotionMSMax, unit: "ms", target: "≤ tick + timeout (1.33 s)", key: "partition_demotion_ms_max", goal: atMost(ms(demotionBound))},
		{label: "partitioned leader to next leader, median", v: r.FailoverPartitionMSMedian, unit: "ms"},
		{label: "partitioned leader to next leader, max", v: r.FailoverPartitionMSMax, unit: "ms", target: "≤ lease + tick + timeout (4.67 s) + 1 s", key: "failover_partition_ms_max", goal: atMost(ms(lease(failoverTick) + demotionBound + time.Second))},
		{label: "crash failover max, defaults (1.5 s tick)", v: r.FailoverCrashDefaultMSMax, unit: "ms", target: "≤ 3 s", key: "failover_crash_default_ms_max", goal: atMost(3000)},
		{label: "primary failover to every worker back, max", v: r.PgFailoverRecoveryMS, unit: "ms", target: "measured (promotion included)"},
		{label: "acknowledged inserts lost in the failover", v: r.PgFailoverLostInserts, target: "0", key: "pg_failover_lost_inserts", goal: atMost(0)},
		{label: "orphan rescue p99, 100 jobs (1 s tick)", v: r.OrphanRescueMSP99, unit: "ms", target: "≤ 3 s", key: "orphan_rescue_ms_p99", goal: atMost(3000)},
		{label: "orphan rescue max, 100 jobs (1 s tick)", v: r.OrphanRescueMSMax, unit: "ms"},
		{label: "bounded / unbounded inserts (jobs.Inserter)", v: r.BoundedInsertRatio, target: "≥ 0.9", key: "bounded_insert_ratio", goal: atLeast(0.9)},
		{label: "bounded / unbounded bulk (COPY)", v: r.BoundedBulkRatio, target: "≥ 0.9", key: "bounded_bulk_ratio", goal: atLeast(0.9)},
		{label: "unbounded / no-trigger inserts", v: r.TriggerInsertRatio, target: "≥ 0.97", key: "unbounded_trigger_insert_ratio", goal: atLeast(0.97)},
		{label: "unbounded / no-trigger bulk", v: r.TriggerBulkRatio, target: "≥ 0.97", key: "unbounded_trigger_bulk_ratio", goal: atLeast(0.97)},
		{label: "bounded queue fetch p99 (River's fetch)", v: r.BoundedFetchP99MS, unit: "ms"},
		{label: "bounded queue fetch p99, recounts back to back", v: r.BoundedFetchP99RecountingMS, unit: "ms"},
		{label: "bounded queue fetch p99, the recount's count alone back to back", v: r.BoundedFetchP99CountingMS, unit: "ms"},
		{label: "bounded fetch p99, recounting / idle (the count's CPU)", v: r.BoundedFetchRecountRatio},
		{label: "bounded fetch p99, recounting / counting alone", v: r.BoundedFetchRecountVsCountRatio, target: "≤ 1.2", key: "bounded_fetch_p99_recount_vs_count_ratio", goal: atMost(1.2)},
		{label: "broadcast publish to delivery p99, 3 processes", v: r.BroadcastP99MS, unit: "ms", target: "≤ 5 ms", key: "broadcast_p99_ms", goal: atMost(5)},
		{label: "broadcast rate delivered to each of 3 processes", v: r.BroadcastMsgsPerSec, unit: "msgs/s", target: "1,000/s"},
		{label: "workflow steps/s / plain jobs/s (10,000-step layered DAG)", v: r.WorkflowStepRatio, target: "≥ 0.8", key: "workflow_step_ratio", goal: atLeast(0.8)},
		{label: "workflow InsertTx / InsertManyFastTx (10,000 steps)", v: r.WorkflowInsertRatio, target: "≥ 0.5", key: "workflow_insert_ratio", goal: atLeast(0.5)},
		{label: "workflow fan-in after 1,000 dependencies, release to start p99", v: r.WorkflowFanInP99MS, unit: "ms", target: "≤ 25 ms", key: "workflow_fanin_ms_p99", goal: atMost(25)},
		{label: "rate limit 100/s, 1,000,000 waiting: row writes per job started", v: r.LimitWaitWritesPerStart, target: "≤ 3", key: "limit_wait_writes_per_start", goal: atMost(3)},
		{label: "rate limit 100/s, 1,000,000 waiting: database CPU per job started", v: r.LimitWaitDBCPUPerStartMS, unit: "ms", target: "measured"},
		{label: "rate limit: database CPU per start, 1,000,000 waiting / 1,000", v: r.LimitWaitDBCPURatio, target: "≤ 1.5", key: "limit_wait_db_cpu_ratio", goal: atMost(1.5)},
		{label: "rate limit 100/s, 1,000,000 waiting: starts / the rate", v: r.LimitRateUtilizationBacklog, target: "≥ 0.97", key: "limit_rate_utilization_backlog", goal: atLeast(0.97)},
		{label: "priority aging 10 s: priority-4 max wait under a priority-1 flood", v: r.AgingMaxWaitMS, unit: "ms", target: "≤ 40 s", key: "aging_max_wait_ms", goal: atMost(40_000)},
		{label: "priority aging off: priority-4 jobs that started under the flood", v: r.AgingOffLowStarted, target: "measured"},
		{label: "priority aging: flood throughput with aging / without", v: r.AgingThroughputRatio, target: "measured"},
		{label: "lock handover p99 (16 processes)", v: r.LockHandoverP99MS, unit: "ms", target: "≤ 10 ms", key: "lock_handover_p99_ms", goal: atMost(10)},
		{label: "lock overlaps (fencing oracle, kills)", v: r.LockOverlaps, target: "0", key: "lock_overlaps", goal: atMost(0)},
		{label: "lock kill -9 to the lock free (its lease's expiry), max (1 s ttl)", v: r.LockKillFreeMSMax, unit: "ms", target: "≤ ttl", key: "lock_kill_free_ms_max", goal: atMost(1000)},
		{label: "lock kill -9 to the next holder's acquisition, max", v: r.LockKillNextMSMax, unit: "ms", target: "measured"},
		{label: "bulk enqueue --file", v: r.BulkJobsPerSec, unit: "jobs/s", target: "≥ 100,000/s", key: "bulk_jobs_per_sec", goal: atLeast(100_000)},
		{label: "plain COPY of the same rows", v: r.BulkCopyJobsPerSec, unit: "jobs/s"},
		{label: "bulk / COPY, from a file", v: r.BulkRatioVsCopy, target: "≥ 0.85", key: "bulk_ratio_vs_copy", goal: atLeast(0.85)},
		{label: "bulk / COPY, from a pipe", v: r.BulkStdinRatioVsCopy, target: "≥ 0.85", key: "bulk_stdin_ratio_vs_copy", goal: atLeast(0.85)},
		{label: "bulk peak RSS, file / pipe", text: fmt.Sprintf("%s / %s", f(r.BulkFilePeakRSSMB, "MB"), f(r.BulkStdinPeakRSSMB, "MB")), target: "bounded"},
		{label: "worker throughput, 5M finished jobs / none", v: r.ScaleThroughputRatio5M, target: "≥ 0.8", key: "scale_throughput_ratio_5m", goal: atLeast(0.8)},
		{label: "pickup p99, 5M finished jobs / none", v: r.ScalePickupP99Ratio5M, target: "≤ 1.5", key: "scale_pickup_p99_ratio_5m", goal: atMost(1.5)},
		{label: "pickup p99 drift over 10 minutes at half the maximum, last / first minute", v: r.SustainedP99Drift, target: "≤ 1.5", key: "sustained_p99_drift", goal: atMost(1.5)},
		{label: "those 10 minutes: the maximum, half of it asked, inserted", text: fmt.Sprintf("%s, %s, %s", f(r.SustainedMaxJobsPerSec, "/s"), f(r.SustainedRate, "/s"), f(r.SustainedInsertedPerSec, "/s"))},
		{label: "river_job after those 10 minutes: dead tuples, size", text: fmt.Sprintf("%s, %s", f(r.SustainedDeadTuples, ""), f(r.SustainedTableMB, "MB"))},
		{label: "vacuumed by (the bench stands in for a server's autovacuum that is off), the bench's vacuums", text: fmt.Sprintf("%s, %s", r.SustainedAutovacuum, f(r.SustainedVacuums, ""))},
		{label: "slowest enqueue/console count, 5M finished jobs", v: r.ConsoleCountsMS5M, unit: "ms", target: "≤ 100 ms", key: "console_counts_ms_5m", goal: atMost(100)},
		{label: "slowest River UI count, 5M finished jobs", v: r.RiverUICountsMS5M, unit: "ms"},
		{label: "/metrics scrape, 5M finished jobs: first (finished counts) / later", text: fmt.Sprintf("%s / %s", f(r.MetricsFirstScrapeMS5M, "ms"), f(r.MetricsScrapeMS5M, "ms"))},
		{label: "worker peak RSS", v: r.WorkerPeakRSSMB, unit: "MB"},
		{label: "worker jobs/s without / with every job traced (best round of each)", text: fmt.Sprintf("%s / %s", f(r.OtelOffJobsPerSec, "/s"), f(r.OtelOnJobsPerSec, "/s"))},
		{label: "worker ratio traced / not", v: r.OtelWorkerRatio, target: "≥ 0.95", key: "otel_worker_ratio", goal: atLeast(0.95)},
		{label: "a writer service's modules (River alone)", v: r.LeanModules, text: f(r.LeanModules, "") + " (" + f(r.LeanRiverModules, "") + ")", target: "≤ 40", key: "lean_modules", goal: atMost(40)},
		{label: "a writer service's binary / River alone", v: r.LeanBinaryRatio, target: "≤ 1.1", key: "lean_binary_ratio", goal: atMost(1.1)},
	}
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// discard is an io.Writer that drops what it is given, so the JSON handler
// still formats every record, as a real worker's would.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// stampKind records when each job starts, for the latency figure.
type stampKind struct {
	river.WorkerDefaults[stampArgs]
	mu         sync.Mutex
	lats, cold []float64 // measured; warm-up
	at         []int64   // each measured job's insert time, unix ns (lats[i] is at[i]'s)
}

func (w *stampKind) Work(_ context.Context, job *river.Job[stampArgs]) error {
	lat := float64(time.Since(time.Unix(0, job.Args.At)).Microseconds()) / 1000
	w.mu.Lock()
	if job.Args.Warm {
		w.cold = append(w.cold, lat)
	} else {
		w.lats, w.at = append(w.lats, lat), append(w.at, job.Args.At)
	}
	w.mu.Unlock()
	return nil
}

// ferryLatency inserts jobs at rate through jobs.Inserter (a separate
// client, as a Go service would) into a ferry worker with its defaults.
func ferryLatency(ctx context.Context, serverURL string, rate int, dur time.Duration, pooled bool) (p50, p99, coldP99 float64, err error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, 0, 0, err
	}
	defer drop()
	cfg, stopBouncer, err := workerConfig(pool, pooled)
	if err != nil {
		return 0, 0, 0, err
	}
	defer stopBouncer()
	if pooled {
		// The inserting service goes through the pooler too.
		pc, err := pgxpool.ParseConfig(cfg.Database.URL)
		if err != nil {
			return 0, 0, 0, err
		}
		dburl.ApplyPooler(pc.ConnConfig, dburl.PoolerTransaction)
		if pool, err = pgxpool.NewWithConfig(ctx, pc); err != nil {
			return 0, 0, 0, err
		}
		defer pool.Close()
	}
	return latencyOn(ctx, pool, cfg, rate, dur)
}

// plotsDir is where the full run draws its pictures.
const plotsDir = "docs/bench"

// pickupRates are the insert rates of the pickup sweep.
var pickupRates = []int{100, 250, 500, 1000, 2000}

// pickupSweep measures insert to start at each rate, each on a database
// of its own.
func pickupSweep(ctx context.Context, serverURL string, rates []int, dur time.Duration) ([]pickupPoint, error) {
	var pts []pickupPoint
	for _, rate := range rates {
		pool, drop, err := scratch(ctx, serverURL)
		if err != nil {
			return nil, err
		}
		lats, _, err := latencySamples(ctx, pool, ferry.Config{Database: ferry.DatabaseConfig{URL: pool.Config().ConnString()}, Admin: ferry.AdminConfig{Addr: "off"}}, rate, dur)
		drop()
		if err != nil {
			return nil, fmt.Errorf("%d jobs/s: %w", rate, err)
		}
		pts = append(pts, pickupPoint{Rate: rate, P50: pct(lats, 50), P90: pct(lats, 90), P99: pct(lats, 99)})
	}
	return pts, nil
}

// latencyOn runs a ferry server of cfg, with a kind that records when each
// job starts, inserts jobs at rate for dur on pool through jobs.Inserter,
// after a warm-up, and returns insert-to-start p50 and p99 in ms, and the
// warm-up's p99.
func latencyOn(ctx context.Context, pool *pgxpool.Pool, cfg ferry.Config, rate int, dur time.Duration) (p50, p99, coldP99 float64, err error) {
	lats, cold, err := latencySamples(ctx, pool, cfg, rate, dur)
	if err != nil {
		return 0, 0, 0, err
	}
	return pct(lats, 50), pct(lats, 99), pct(cold, 99), nil
}

// latencySamples is latencyOn's measurement: every job's insert to start,
// in ms, measured and in the warm-up.
func latencySamples(ctx context.Context, pool *pgxpool.Pool, cfg ferry.Config, rate int, dur time.Duration) (lats, cold []float64, err error) {
	return tenantLatencySamples(ctx, pool, cfg, rate, dur, "")
}

// tenantLatencySamples is latencySamples whose jobs carry tenant in their
// args' tenant field (a fairness's key; none when empty).
func tenantLatencySamples(ctx context.Context, pool *pgxpool.Pool, cfg ferry.Config, rate int, dur time.Duration, tenant string) (lats, cold []float64, err error) {
	w := &stampKind{}
	cfg.Kinds = []jobs.Kind{jobs.Define[stampArgs](w, river.QueueDefault, "bench stamp")}
	cfg.Logger = slog.New(slog.DiscardHandler)
	_, stop, err := startServer(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	ins, err := jobs.NewInserter(pool)
	if err != nil {
		return nil, nil, err
	}
	// A warm-up of warmUp at the same rate first: a server's first
	// second is slower, and is reported apart (cold).
	warm := int(float64(rate) * warmUp.Seconds())
	n := int(float64(rate) * dur.Seconds())
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for i := range warm + n {
		<-t.C
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ins.InsertTx(ctx, tx, stampArgs{At: time.Now().UnixNano(), Warm: i < warm, Tenant: tenant}, nil)
			return err
		})
		if err != nil {
			return nil, nil, err
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		w.mu.Lock()
		got := len(w.lats) + len(w.cold)
		w.mu.Unlock()
		if got >= warm+n {
			break
		}
		if time.Now().After(deadline) {
			return nil, nil, fmt.Errorf("only %d of %d jobs started", got, warm+n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lats, w.cold, nil
}

// workerPeakRSS runs a real worker process over a backlog and reads its
// peak resident set (VmHWM) once the backlog is worked.
func workerPeakRSS(ctx context.Context, serverURL string, n int) (float64, error) {
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, err
	}
	defer drop()
	if err := noopBacklog(ctx, pool, n, nil); err != nil {
		return 0, err
	}
	p, err := fleet.Start(bin, []string{"DATABASE_URL=" + pool.Config().ConnString(), "FERRY_LOG_FORMAT=json"}, nil, "run", "--admin-addr", "off")
	if err != nil {
		return 0, err
	}
	defer stopProc(p)
	probe, err := dialProbe(ctx, pool)
	if err != nil {
		return 0, err
	}
	defer probe.close(ctx)
	if _, err := probe.waitNoneLeft(ctx, p); err != nil {
		return 0, err
	}
	return vmHWM(p.Pid())
}

func vmHWM(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				return 0, err
			}
			return float64(kb) / 1024, nil
		}
	}
	return 0, fmt.Errorf("no VmHWM in /proc/%d/status", pid)
}

// noopBacklog inserts n ferry.noop jobs with River's COPY insert, through
// mw (a seal's middleware) when it is not nil.
func noopBacklog(ctx context.Context, pool *pgxpool.Pool, n int, mw rivertype.Middleware) error {
	cfg := &river.Config{}
	if mw != nil {
		cfg.Middleware = []rivertype.Middleware{mw}
	}
	ic, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, 0, 10000)
	for i := 0; i < n; i += 10000 {
		params = params[:0]
		for range min(10000, n-i) {
			params = append(params, river.InsertManyParams{Args: jobs.NoopArgs{}})
		}
		if _, err := ic.InsertManyFast(ctx, params); err != nil {
			return err
		}
	}
	return nil
}

// serverSettings reads the settings of the server at serverURL that shape
// the bench's figures.
func serverSettings(ctx context.Context, serverURL string) (map[string]string, error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	rows, err := conn.Query(ctx, `SELECT name, current_setting(name) FROM pg_settings
		WHERE name IN ('server_version', 'autovacuum', 'synchronous_commit', 'fsync', 'shared_buffers', 'max_connections')`)
	if err != nil {
		return nil, fmt.Errorf("read the server's settings: %w", err)
	}
	out := map[string]string{}
	var name, value string
	if _, err := pgx.ForEachRow(rows, []any{&name, &value}, func() error {
		out[name] = value
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read the server's settings: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("read the server's settings: none")
	}
	return out, nil
}
