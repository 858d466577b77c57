package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/jobs"
)

// orphanQueue is the queue of the orphans bench's jobs: the victim and the
// survivor work it, the leader does not.
const orphanQueue = "orphans"

// orphanResult is the rescue of a dead worker's running jobs: from the
// kill -9 of a worker running Jobs long jobs to the moment every one of
// them is available again or running on another worker, at a leader tick
// of TickMS.
type orphanResult struct {
	Trials   int       `json:"trials"`
	Jobs     int       `json:"jobs"`
	TickMS   int64     `json:"tick_ms"`
	RescueMS []float64 `json:"rescue_ms"`
	P50MS    float64   `json:"rescue_ms_p50"`
	P99MS    float64   `json:"rescue_ms_p99"`
	MaxMS    float64   `json:"rescue_ms_max"`
}

// orphanRescue measures ferry's rescue of a killed worker's running jobs
// with real `worker run` processes at a leader tick of tick: a leader that
// does not work the jobs' queue (so it holds the rescuer, and nothing
// else), and for each trial a victim that runs all n jobs (ferry.noop
// sleeping ten minutes, in a queue of n workers), and a survivor with as
// many workers in the same queue, started once the victim runs them all.
// The victim is killed with kill -9 at a random phase against the tick,
// and the jobs are polled by id every 5 ms until each is available again
// or running on a worker other than the victim. The leader's "rescue:
// orphaned jobs rescued" record must then name the victim and count n.
// Each trial's jobs are deleted, and its survivor killed and declared
// dead, before the next one starts.
func orphanRescue(ctx context.Context, serverURL string, trials, n int, tick time.Duration) (orphanResult, error) {
	res := orphanResult{Trials: trials, Jobs: n, TickMS: tick.Milliseconds()}
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return res, err
	}
	defer drop()
	ic, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return res, err
	}

	w := &workers{Fleet: fleet.New(), bin: bin, url: pool.Config().ConnString(), tick: tick}
	defer func() { _ = w.Kill(time.Minute) }()
	wait := 4*tick + 10*time.Second
	leader, err := w.start("default=1")
	if err != nil {
		return res, err
	}
	if _, err := w.await(nil, "election: runnables started", leader, wait); err != nil {
		return res, err
	}
	// startWorker starts a worker of the jobs' queue and returns it with
	// its River client id once its client has started.
	startWorker := func() (*fleet.Proc, string, error) {
		p, err := w.start(fmt.Sprintf("%s=%d", orphanQueue, n))
		if err != nil {
			return nil, "", err
		}
		reg, err := w.await(nil, "liveness: worker registered", p, wait)
		if err != nil {
			return p, "", err
		}
		if _, err := w.await(nil, "ferry: started", p, wait); err != nil {
			return p, "", err
		}
		id, _ := reg.Attrs["client_id"].(string)
		if id == "" {
			return p, "", errors.New(`"liveness: worker registered" has no client_id`)
		}
		return p, id, nil
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.NoopArgs{Sleep: jobs.Duration(10 * time.Minute)}, InsertOpts: &river.InsertOpts{Queue: orphanQueue}}
	}
	const (
		runningOn = `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'running' AND attempted_by[cardinality(attempted_by)] = $2`
		// back: available again, or running on a worker that is not the
		// victim. A job discarded or anything else is neither.
		back = `SELECT count(*) FILTER (WHERE state = 'available' OR (state = 'running' AND attempted_by[cardinality(attempted_by)] <> $2)),
			count(*) FILTER (WHERE state NOT IN ('available', 'running')) FROM river_job WHERE id = ANY($1)`
	)
	for trial := range trials {
		victim, victimID, err := startWorker()
		if err != nil {
			return res, fmt.Errorf("trial %d: victim: %w", trial+1, err)
		}
		inserted, err := ic.InsertMany(ctx, params)
		if err != nil {
			return res, err
		}
		ids := make([]int64, len(inserted))
		for i, r := range inserted {
			ids[i] = r.Job.ID
		}
		if err := pollUntil(ctx, 30*time.Second, 5*time.Millisecond, func() (bool, error) {
			var running int
			err := pool.QueryRow(ctx, runningOn, ids, victimID).Scan(&running)
			return running == n, err
		}); err != nil {
			return res, fmt.Errorf("trial %d: the victim never ran all %d jobs: %w", trial+1, n, err)
		}
		survivor, survivorID, err := startWorker()
		if err != nil {
			return res, fmt.Errorf("trial %d: survivor: %w", trial+1, err)
		}
		time.Sleep(rand.N(tick)) // a random phase against the leader's tick
		m := w.Mark()
		t0 := time.Now()
		if err := victim.Kill(); err != nil {
			return res, err
		}
		var elapsed time.Duration
		if err := pollUntil(ctx, 30*time.Second, 5*time.Millisecond, func() (bool, error) {
			var ok, other int
			if err := pool.QueryRow(ctx, back, ids, victimID).Scan(&ok, &other); err != nil {
				return false, err
			}
			elapsed = time.Since(t0)
			if other > 0 {
				return false, fmt.Errorf("%d jobs neither available nor running", other)
			}
			return ok == n, nil
		}); err != nil {
			return res, fmt.Errorf("trial %d: not every job back: %w", trial+1, err)
		}
		res.RescueMS = append(res.RescueMS, float64(elapsed.Microseconds())/1000)
		rec, err := w.WaitForRecord(m, 10*time.Second, func(r fleet.Record) bool {
			return r.Proc == leader && r.Msg == "rescue: orphaned jobs rescued" && r.Attrs["worker"] == victimID
		})
		if err != nil {
			return res, fmt.Errorf("trial %d: the leader logged no rescue of the victim: %w", trial+1, err)
		}
		if got := fmt.Sprint(rec.Attrs["count"]); got != fmt.Sprint(n) {
			return res, fmt.Errorf("trial %d: the leader rescued %s of the victim's %d jobs", trial+1, got, n)
		}
		fmt.Fprintf(os.Stderr, "bench: orphans: trial %d: %d jobs back %.0f ms after the kill\n", trial+1, n, res.RescueMS[len(res.RescueMS)-1])

		// Clean up: the survivor's jobs go, then the survivor, declared dead
		// before the next trial so that its rescue is not in the next one's.
		if _, err := pool.Exec(ctx, "DELETE FROM river_job WHERE id = ANY($1)", ids); err != nil {
			return res, err
		}
		if err := survivor.Kill(); err != nil {
			return res, err
		}
		if err := pollUntil(ctx, wait, 20*time.Millisecond, func() (bool, error) {
			var dead bool
			err := pool.QueryRow(ctx, "SELECT dead_at IS NOT NULL FROM ferry_worker WHERE client_id = $1", survivorID).Scan(&dead)
			return dead, err
		}); err != nil {
			return res, fmt.Errorf("trial %d: the survivor was not declared dead: %w", trial+1, err)
		}
		<-victim.Done()
		<-survivor.Done()
	}
	res.P50MS, res.P99MS, res.MaxMS = pct(res.RescueMS, 50), pct(res.RescueMS, 99), pct(res.RescueMS, 100)
	return res, nil
}

// pollUntil calls cond every `every` until it reports true, returns an
// error, or timeout passes.
func pollUntil(ctx context.Context, timeout, every time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}
