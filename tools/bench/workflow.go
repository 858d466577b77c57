package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

// workflowResult is what workflows cost against plain jobs, and how soon a
// fan-in starts.
type workflowResult struct {
	// Steps is the number of steps of the layered DAG (and of plain jobs).
	Steps int `json:"workflow_steps"`
	// StepRatio is the rate of a ferry server (embedded, at its defaults)
	// working a layered DAG of no-op steps against the same number of
	// plain no-op jobs, the median of paired rounds' ratios.
	StepRatio       float64   `json:"workflow_step_ratio"`
	StepRatioRounds []float64 `json:"workflow_step_ratio_rounds"`
	StepsPerSec     float64   `json:"workflow_steps_per_sec"`
	PlainPerSec     float64   `json:"workflow_plain_jobs_per_sec"`
	// InsertRatio is the rate of InsertTx of the DAG in one transaction
	// against River's InsertManyFastTx of as many plain jobs, the median
	// of paired rounds' ratios.
	InsertRatio       float64   `json:"workflow_insert_ratio"`
	InsertRatioRounds []float64 `json:"workflow_insert_ratio_rounds"`
	// FanIn*: a fan-in step after 1,000 dependencies, Trials times, on a
	// running server: from the commit that completed the last dependency
	// (the step's release, metadata ferry_ready_at) to the fan-in's start (its fetch,
	// attempted_at), both on the database's clock; and from the last
	// dependency's finalized_at (its worker's return) to the fan-in's
	// start, which adds the completion's own commit.
	FanInTrials      int     `json:"workflow_fanin_trials"`
	FanInP50MS       float64 `json:"workflow_fanin_ms_p50"`
	FanInP99MS       float64 `json:"workflow_fanin_ms_p99"`
	FanInReturnP50MS float64 `json:"workflow_fanin_from_return_ms_p50"`
	FanInReturnP99MS float64 `json:"workflow_fanin_from_return_ms_p99"`
}

// layeredDAG is a DAG of n no-op steps in layers of width, each step after
// two steps of the layer before (one when the layer before has one), drawn
// with a fixed seed.
func layeredDAG(n, width int) *workflow.Workflow {
	rng := rand.New(rand.NewPCG(7, 11))
	wf := workflow.New("bench layered")
	for i := range n {
		var deps []string
		if layer := i / width; layer > 0 {
			base := (layer - 1) * width
			a := base + rng.IntN(width)
			deps = append(deps, fmt.Sprint(a))
			if b := base + rng.IntN(width); b != a {
				deps = append(deps, fmt.Sprint(b))
			}
		}
		wf.Add(fmt.Sprint(i), jobs.NoopArgs{}, workflow.After(deps...))
	}
	return wf
}

func workflowBench(ctx context.Context, serverURL string, n, rounds, fanins int) (workflowResult, error) {
	r := workflowResult{Steps: n, FanInTrials: fanins}
	p, err := pairedRounds(rounds,
		func() (float64, error) { return workflowThroughput(ctx, serverURL, n, false) },
		func() (float64, error) { return workflowThroughput(ctx, serverURL, n, true) })
	if err != nil {
		return r, err
	}
	r.PlainPerSec, r.StepsPerSec, r.StepRatio, r.StepRatioRounds = p.Base, p.Other, p.Ratio(), p.Ratios
	fmt.Fprintf(os.Stderr, "workflow: %d-step layered DAG %.0f steps/s, %d plain jobs %.0f jobs/s: ratio %.3f (rounds %.3f)\n",
		n, r.StepsPerSec, n, r.PlainPerSec, r.StepRatio, r.StepRatioRounds)

	pi, err := pairedRounds(rounds,
		func() (float64, error) { return workflowInsertRate(ctx, serverURL, n, false) },
		func() (float64, error) { return workflowInsertRate(ctx, serverURL, n, true) })
	if err != nil {
		return r, err
	}
	r.InsertRatio, r.InsertRatioRounds = pi.Ratio(), pi.Ratios
	fmt.Fprintf(os.Stderr, "workflow: insert of the DAG in one transaction %.0f steps/s, InsertManyFastTx %.0f jobs/s: ratio %.3f (rounds %.3f)\n",
		pi.Other, pi.Base, r.InsertRatio, r.InsertRatioRounds)

	if err := workflowFanIn(ctx, serverURL, fanins, &r); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "workflow: fan-in after 1,000 dependencies, %d trials: release to start p50 %.1f ms, p99 %.1f ms; last dependency's return to start p50 %.1f ms, p99 %.1f ms\n",
		fanins, r.FanInP50MS, r.FanInP99MS, r.FanInReturnP50MS, r.FanInReturnP99MS)
	return r, nil
}

// workflowThroughput works n no-op jobs with ferry's server embedded at
// its defaults: a layered DAG of n steps (dag) or n plain jobs, written
// before it starts; its rate is counted by its River client's completion
// events.
func workflowThroughput(ctx context.Context, serverURL string, n int, dag bool) (float64, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, err
	}
	defer drop()
	cfg, _, err := workerConfig(pool, false)
	if err != nil {
		return 0, err
	}
	if dag {
		ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
		if err != nil {
			return 0, err
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := workflow.InsertTx(ctx, tx, ins, layeredDAG(n, 1000))
			return err
		}); err != nil {
			return 0, err
		}
		if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
			return 0, err
		}
	} else if err := backlogSettled(ctx, pool, n, nil); err != nil {
		return 0, err
	}
	cfg.Logger = workerLog()
	return serverThroughput(ctx, cfg, n)
}

// workflowInsertRate inserts n jobs in one transaction: the layered DAG
// through InsertTx (dag), or n plain no-op jobs through River's
// InsertManyFastTx; the rate is from BEGIN to COMMIT.
func workflowInsertRate(ctx context.Context, serverURL string, n int, dag bool) (float64, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, err
	}
	defer drop()
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	if err != nil {
		return 0, err
	}
	wf := layeredDAG(n, 1000)
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.NoopArgs{}}
	}
	start := time.Now()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if dag {
			_, err := workflow.InsertTx(ctx, tx, ins, wf)
			return err
		}
		_, err := ins.Client().InsertManyFastTx(ctx, tx, params)
		return err
	})
	if err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// workflowFanIn runs trials workflows of 1,000 no-op steps and a fan-in
// after them, one after the other, on one ferry server at its defaults,
// and reads each fan-in's delays from its rows.
func workflowFanIn(ctx context.Context, serverURL string, trials int, r *workflowResult) error {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return err
	}
	defer drop()
	cfg, _, err := workerConfig(pool, false)
	if err != nil {
		return err
	}
	cfg.Logger = workerLog()
	_, stop, err := startServer(ctx, cfg)
	if err != nil {
		return err
	}
	defer stop()
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	if err != nil {
		return err
	}
	var release, fromReturn []float64
	for t := range trials {
		wf := workflow.New("bench fan-in")
		deps := make([]string, 1000)
		for i := range deps {
			deps[i] = fmt.Sprint(i)
			wf.Add(deps[i], jobs.NoopArgs{})
		}
		wf.Add("join", jobs.NoopArgs{}, workflow.After(deps...))
		var id string
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := workflow.InsertTx(ctx, tx, ins, wf)
			if err == nil {
				id = res.ID
			}
			return err
		}); err != nil {
			return err
		}
		a, b, err := waitFanIn(ctx, pool, id)
		if err != nil {
			return fmt.Errorf("fan-in trial %d: %w", t+1, err)
		}
		release, fromReturn = append(release, a), append(fromReturn, b)
	}
	r.FanInP50MS, r.FanInP99MS = pct(release, 50), pct(release, 99)
	r.FanInReturnP50MS, r.FanInReturnP99MS = pct(fromReturn, 50), pct(fromReturn, 99)
	return nil
}

// waitFanIn waits for the workflow id to complete (one read every 50 ms
// of its row, by primary key) and reads its fan-in's delays in ms.
func waitFanIn(ctx context.Context, pool *pgxpool.Pool, id string) (release, fromReturn float64, err error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var state string
		if err := pool.QueryRow(ctx, `SELECT state FROM ferry_workflow WHERE id = $1`, id).Scan(&state); err != nil {
			return 0, 0, err
		}
		if state == "completed" {
			break
		}
		if state != "running" || time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("workflow %s is %s", id, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
	err = pool.QueryRow(ctx, `SELECT
    extract(epoch FROM j.attempted_at - (j.metadata->>'ferry_ready_at')::timestamptz) * 1000,
    extract(epoch FROM j.attempted_at - (SELECT max(d.finalized_at) FROM ferry_workflow_step ds JOIN river_job d ON d.id = ds.job_id
                                         WHERE ds.workflow_id = s.workflow_id AND ds.name <> 'join')) * 1000
FROM ferry_workflow_step s JOIN river_job j ON j.id = s.job_id
WHERE s.workflow_id = $1 AND s.name = 'join'`, id).Scan(&release, &fromReturn)
	return release, fromReturn, err
}
