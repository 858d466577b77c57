package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/loop"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/workflow"
)

// scalingResult is what one Postgres primary spends on ferry's work
// (-mode scaling): its CPU (every Postgres process's, from /proc) and the
// WAL it writes (pg_current_wal_lsn), per job, per outbox message
// delivered and per workflow step, each worked by one `worker run`
// process at its defaults; and the connections that process holds.
// Each unit is measured in two parts: its write (the backlog, before the
// worker starts) and its work (from the worker's launch to the last
// completion on its /metrics).
type scalingResult struct {
	Jobs     int `json:"scale_jobs"`
	Messages int `json:"scale_outbox_messages"`
	Steps    int `json:"scale_workflow_steps"`
	// Jobs: written 10,000 to a statement (River's InsertManyFast), then
	// worked; CPUPer1kJobsMS is the whole (write and work).
	JobInsertCPUPer1kMS float64 `json:"scale_pg_cpu_ms_per_1k_jobs_insert"`
	JobWorkCPUPer1kMS   float64 `json:"scale_pg_cpu_ms_per_1k_jobs_work"`
	CPUPer1kJobsMS      float64 `json:"scale_pg_cpu_ms_per_1k_jobs"`
	JobInsertWALBytes   float64 `json:"scale_wal_bytes_per_job_insert"`
	JobWorkWALBytes     float64 `json:"scale_wal_bytes_per_job_work"`
	WALBytesPerJob      float64 `json:"scale_wal_bytes_per_job"`
	JobsPerSec          float64 `json:"scale_jobs_per_sec"`
	// Outbox messages: added by one INSERT … SELECT, then relayed and
	// delivered to a webhook (a loopback receiver that answers 204).
	OutboxAddCPUMS         float64 `json:"scale_pg_cpu_ms_per_outbox_message_add"`
	OutboxCPUMS            float64 `json:"scale_pg_cpu_ms_per_outbox_message"`
	OutboxAddWALBytes      float64 `json:"scale_wal_bytes_per_outbox_message_add"`
	OutboxWALBytes         float64 `json:"scale_wal_bytes_per_outbox_message"`
	OutboxPerSec           float64 `json:"scale_outbox_messages_per_sec"`
	StepInsertCPUMS        float64 `json:"scale_pg_cpu_ms_per_workflow_step_insert"`
	StepCPUMS              float64 `json:"scale_pg_cpu_ms_per_workflow_step"`
	StepInsertWALBytes     float64 `json:"scale_wal_bytes_per_workflow_step_insert"`
	StepWALBytes           float64 `json:"scale_wal_bytes_per_workflow_step"`
	StepsPerSec            float64 `json:"scale_workflow_steps_per_sec"`
	ConnectionsPerReplica  int     `json:"scale_connections_per_replica"`
	ConnectionsByApp       string  `json:"scale_connections_by_application"`
	PoolMaxConns           int     `json:"scale_pool_max_conns"`
	PGSaturationJobsPerSec float64 `json:"scale_pg_saturation_jobs_per_sec"`
	WALMBPerSecSaturation  float64 `json:"scale_wal_mb_per_sec_at_saturation"`
	Cores                  int     `json:"scale_cores"`
	// OtherActive is how many of the once-a-second samples saw a query
	// running in another database: another load on the same server,
	// whose CPU and WAL the figures then include.
	OtherActive int `json:"scale_samples_with_other_load"`
}

// scalingBench measures jobs, then outbox messages, then workflow steps,
// each on a scratch database of its own.
func scalingBench(ctx context.Context, serverURL string, nJobs, nMessages, nSteps int) (scalingResult, error) {
	r := scalingResult{Jobs: nJobs, Messages: nMessages, Steps: nSteps, Cores: runtime.NumCPU(), PoolMaxConns: ferry.DefaultPoolMaxConns}
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	obs, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return r, err
	}
	defer func() { _ = obs.Close(context.WithoutCancel(ctx)) }()
	s := &scalingRun{obs: obs, bin: bin, dir: dir}

	jw, jr, err := s.run(ctx, serverURL, jobs.NoopArgs{}.Kind(), nJobs, "", func(ctx context.Context, pool *pgxpool.Pool) error {
		return noopBacklog(ctx, pool, nJobs, nil)
	})
	if err != nil {
		return r, fmt.Errorf("jobs: %w", err)
	}
	r.JobInsertCPUPer1kMS, r.JobInsertWALBytes, _ = jw.per(nJobs)
	r.JobWorkCPUPer1kMS, r.JobWorkWALBytes, r.JobsPerSec = jr.per(nJobs)
	r.JobInsertCPUPer1kMS, r.JobWorkCPUPer1kMS = r.JobInsertCPUPer1kMS*1000, r.JobWorkCPUPer1kMS*1000
	r.CPUPer1kJobsMS = r.JobInsertCPUPer1kMS + r.JobWorkCPUPer1kMS
	r.WALBytesPerJob = r.JobInsertWALBytes + r.JobWorkWALBytes
	fmt.Fprintf(os.Stderr, "scaling: %d no-op jobs: Postgres CPU per 1,000 %.0f ms (write %.0f, work %.0f), WAL per job %.0f bytes (write %.0f, work %.0f); worked at %.0f jobs/s\n",
		nJobs, r.CPUPer1kJobsMS, r.JobInsertCPUPer1kMS, r.JobWorkCPUPer1kMS, r.WALBytesPerJob, r.JobInsertWALBytes, r.JobWorkWALBytes, r.JobsPerSec)

	hook, stopHook, err := scalingReceiver()
	if err != nil {
		return r, err
	}
	defer stopHook()
	routes := fmt.Sprintf("outbox:\n  routes:\n    - {topic: bench, name: hook, url: %q, secret_env: SCALING_HOOK_SECRET}\n", hook)
	ow, or, err := s.run(ctx, serverURL, outbox.DeliverArgs{}.Kind(), nMessages, routes, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload) SELECT 'bench', jsonb_build_object('i', i) FROM generate_series(1, $1) AS i`, nMessages)
		return err
	})
	if err != nil {
		return r, fmt.Errorf("outbox: %w", err)
	}
	r.OutboxAddCPUMS, r.OutboxAddWALBytes, _ = ow.per(nMessages)
	r.OutboxCPUMS, r.OutboxWALBytes, r.OutboxPerSec = or.per(nMessages)
	fmt.Fprintf(os.Stderr, "scaling: %d outbox messages to a webhook: relay and delivery %.3f ms Postgres CPU and %.0f WAL bytes per message (the add %.3f ms, %.0f bytes); %.0f messages/s\n",
		nMessages, r.OutboxCPUMS, r.OutboxWALBytes, r.OutboxAddCPUMS, r.OutboxAddWALBytes, r.OutboxPerSec)

	sw, sr, err := s.run(ctx, serverURL, jobs.NoopArgs{}.Kind(), nSteps, "", func(ctx context.Context, pool *pgxpool.Pool) error {
		ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := workflow.InsertTx(ctx, tx, ins, layeredDAG(nSteps, 1000))
			return err
		})
	})
	if err != nil {
		return r, fmt.Errorf("workflow: %w", err)
	}
	r.StepInsertCPUMS, r.StepInsertWALBytes, _ = sw.per(nSteps)
	r.StepCPUMS, r.StepWALBytes, r.StepsPerSec = sr.per(nSteps)
	fmt.Fprintf(os.Stderr, "scaling: a %d-step layered workflow: work %.3f ms Postgres CPU and %.0f WAL bytes per step (the insert %.3f ms, %.0f bytes); %.0f steps/s\n",
		nSteps, r.StepCPUMS, r.StepWALBytes, r.StepInsertCPUMS, r.StepInsertWALBytes, r.StepsPerSec)

	r.ConnectionsPerReplica, r.ConnectionsByApp, r.OtherActive = s.maxConns, s.maxConnsBy, s.otherActive
	// Postgres with every core of this machine and nothing else to do:
	// the jobs/s at which its CPU would be spent, writes and work both.
	r.PGSaturationJobsPerSec = float64(r.Cores) * 1e6 / r.CPUPer1kJobsMS
	r.WALMBPerSecSaturation = r.PGSaturationJobsPerSec * r.WALBytesPerJob / 1e6
	fmt.Fprintf(os.Stderr, "scaling: a worker at its defaults held %d connections (%s; pool max %d); Postgres on %d cores would saturate at %.0f jobs/s, writing %.1f MB/s of WAL; %d samples saw load in another database\n",
		r.ConnectionsPerReplica, r.ConnectionsByApp, r.PoolMaxConns, r.Cores, r.PGSaturationJobsPerSec, r.WALMBPerSecSaturation, r.OtherActive)
	return r, nil
}

// scalingRun runs the phases of -mode scaling; obs is the bench's own
// connection, on the server's default database, that reads WAL positions
// and pg_stat_activity.
type scalingRun struct {
	obs         *pgx.Conn
	bin, dir    string
	maxConns    int
	maxConnsBy  string
	otherActive int
}

// pgUse is the Postgres server's CPU time and WAL position at a moment.
type pgUse struct {
	at  time.Time
	cpu time.Duration
	lsn string
}

// pgSpent is what Postgres spent between two pgUse.
type pgSpent struct {
	elapsed time.Duration
	cpu     time.Duration
	wal     int64
}

// per is p spread over n units: Postgres CPU in ms and WAL bytes per
// unit, and units per second.
func (p pgSpent) per(n int) (cpuMS, walBytes, perSec float64) {
	return float64(p.cpu.Microseconds()) / 1000 / float64(n), float64(p.wal) / float64(n), float64(n) / p.elapsed.Seconds()
}

// mark reads the Postgres server's CPU and WAL position.
func (s *scalingRun) mark(ctx context.Context) (pgUse, error) {
	u := pgUse{at: time.Now()}
	if err := s.obs.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&u.lsn); err != nil {
		return u, err
	}
	var err error
	u.cpu, err = postgresCPU()
	return u, err
}

// spent is what Postgres spent since a.
func (s *scalingRun) spent(ctx context.Context, a pgUse) (pgSpent, error) {
	b, err := s.mark(ctx)
	if err != nil {
		return pgSpent{}, err
	}
	p := pgSpent{elapsed: b.at.Sub(a.at), cpu: b.cpu - a.cpu}
	err = s.obs.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, b.lsn, a.lsn).Scan(&p.wal)
	return p, err
}

// run writes a scratch database's backlog of n units (write), then
// launches a `worker run` at its defaults (with config, if any) and waits
// until its /metrics counts n jobs of kind completed, reading them once a
// second. It returns what Postgres spent on the write and on the work;
// between the two, a checkpoint that a later one of the work's would
// otherwise not find done is not made: every page the work changes first
// since the last checkpoint costs a full-page image, as in a deployment.
func (s *scalingRun) run(ctx context.Context, serverURL, kind string, n int, config string, write func(context.Context, *pgxpool.Pool) error) (w, r pgSpent, err error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return w, r, err
	}
	defer drop()
	// A checkpoint first, so that the write and the work start on a clean
	// slate and no checkpoint the scratch database's creation asked for
	// lands in them.
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return w, r, fmt.Errorf("checkpoint (the bench's role needs pg_checkpoint, as scripts/pg-up grants): %w", err)
	}
	m0, err := s.mark(ctx)
	if err != nil {
		return w, r, err
	}
	if err := write(ctx, pool); err != nil {
		return w, r, err
	}
	if w, err = s.spent(ctx, m0); err != nil {
		return w, r, err
	}
	env := []string{"DATABASE_URL=" + pool.Config().ConnString(), "FERRY_LOG_LEVEL=warn", "SCALING_HOOK_SECRET=whsec_" + "c2NhbGluZy1iZW5jaC1zZWNyZXQ="}
	if config != "" {
		cfg := filepath.Join(s.dir, "scaling.yaml")
		if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
			return w, r, err
		}
		env = append(env, "FERRY_CONFIG="+cfg)
	}
	addr, err := freeAddr()
	if err != nil {
		return w, r, err
	}
	env = append(env, "FERRY_ADMIN_ADDR="+addr)
	m1, err := s.mark(ctx)
	if err != nil {
		return w, r, err
	}
	p, err := fleet.Start(s.bin, env, nil, "run")
	if err != nil {
		return w, r, err
	}
	defer stopProc(p)
	metrics := "http://" + addr + "/metrics"
	dbName := pool.Config().ConnConfig.Database
	for deadline := time.Now().Add(4 * time.Minute); ; {
		if err := loop.Sleep(ctx, time.Second); err != nil {
			return w, r, err
		}
		if p.Exited() {
			return w, r, fmt.Errorf("the worker exited: %s", tail(p))
		}
		done, err := completedOnMetrics(ctx, metrics, kind)
		if err == nil && done >= n {
			break
		}
		if time.Now().After(deadline) {
			return w, r, fmt.Errorf("%d of %d %s completed in 4 minutes (%v; worker: %s)", done, n, kind, err, tail(p))
		}
		if err := s.sample(ctx, dbName); err != nil {
			return w, r, err
		}
	}
	r, err = s.spent(ctx, m1)
	return w, r, err
}

// sample counts the worker's connections to its database (every
// application_name ferry sets begins with ferry-) and whether a query
// runs in another database.
func (s *scalingRun) sample(ctx context.Context, db string) error {
	rows, err := s.obs.Query(ctx, `SELECT split_part(application_name, ':', 1), count(*) FROM pg_stat_activity
WHERE datname = $1 AND application_name LIKE 'ferry-%' GROUP BY 1 ORDER BY 1`, db)
	if err != nil {
		return err
	}
	var (
		app   string
		count int
		total int
		by    []string
	)
	if _, err := pgx.ForEachRow(rows, []any{&app, &count}, func() error {
		total += count
		by = append(by, app+" "+strconv.Itoa(count))
		return nil
	}); err != nil {
		return err
	}
	if total > s.maxConns {
		s.maxConns, s.maxConnsBy = total, strings.Join(by, ", ")
	}
	var other int
	if err := s.obs.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
WHERE state = 'active' AND backend_type = 'client backend' AND datname <> $1 AND pid <> pg_backend_pid()`, db).Scan(&other); err != nil {
		return err
	}
	if other > 0 {
		s.otherActive++
	}
	return nil
}

// scalingReceiver is a webhook receiver on loopback that answers 204 to
// every request, and a function that stops it.
func scalingReceiver() (string, func(), error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return "http://" + l.Addr().String() + "/hook", func() { _ = srv.Close() }, nil
}

// postgresCPU is the CPU time the local Postgres server has used: every
// process named postgres (the postmaster, its backends and background
// processes) as /proc has them, and the postmaster's exited children
// (their time is added to its cutime and cstime as it reaps them).
func postgresCPU() (time.Duration, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	type proc struct {
		ppid           int
		self, children int64
	}
	procs := map[int]proc{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // exited since the listing
		}
		name, p, ok := parseProcStat(string(b))
		if !ok || name != "postgres" {
			continue
		}
		procs[pid] = proc{ppid: p[0], self: int64(p[1] + p[2]), children: int64(p[3] + p[4])}
	}
	var ticks int64
	for _, p := range procs {
		ticks += p.self
		if _, parent := procs[p.ppid]; !parent {
			ticks += p.children
		}
	}
	if len(procs) == 0 {
		return 0, errors.New("no postgres process on this machine: -mode scaling reads the server's CPU from /proc")
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// parseProcStat reads a /proc/<pid>/stat line: the command's name, and
// ppid, utime, stime, cutime and cstime (fields 4, 14, 15, 16 and 17).
func parseProcStat(line string) (name string, f [5]int, ok bool) {
	open, end := strings.IndexByte(line, '('), strings.LastIndexByte(line, ')')
	if open < 0 || end < open {
		return "", f, false
	}
	fields := strings.Fields(line[end+1:])
	if len(fields) < 15 {
		return "", f, false
	}
	for i, at := range []int{1, 11, 12, 13, 14} {
		v, err := strconv.Atoi(fields[at])
		if err != nil {
			return "", f, false
		}
		f[i] = v
	}
	return line[open+1 : end], f, true
}
