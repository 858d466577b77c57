package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

// nameWorkflows is the workflows' check.
const nameWorkflows = "workflows: steps after their dependencies, none lost, none after a cancel"

// wfShapes are the workflows the suite runs through the faults: diamonds,
// wide fan-outs and their fan-ins, chains, steps added at run time (each
// with a fan-in after all it adds), and diamonds cancelled mid-way. Each
// step sleeps a little, so that steps are running when the faults strike.
type wfShapes struct {
	diamonds, fans, fanWidth, chains, chainLength, adders, addWidth, cancelled int
	sleepMS                                                                    int
}

// shapesFor is the full run's shapes, or the short run's.
func shapesFor(short bool) wfShapes {
	if short {
		return wfShapes{diamonds: 10, fans: 1, fanWidth: 200, chains: 2, chainLength: 50, adders: 3, addWidth: 20, cancelled: 3, sleepMS: 50}
	}
	return wfShapes{diamonds: 30, fans: 2, fanWidth: 1000, chains: 3, chainLength: 200, adders: 10, addWidth: 50, cancelled: 5, sleepMS: 100}
}

// wfRun is what the producer did: the workflows it inserted, and those it
// cancelled with when each cancel had committed.
type wfRun struct {
	mu        sync.Mutex
	inserted  []string
	cancelled map[string]time.Time
	err       error
}

func step(sleepMS int, add ...string) jobs.RawArgs {
	args := fmt.Sprintf(`{"sleep_ms":%d}`, sleepMS)
	if len(add) > 0 {
		args = fmt.Sprintf(`{"sleep_ms":%d,"add":["%s"]}`, sleepMS, strings.Join(add, `","`))
	}
	return jobs.RawArgs{KindName: "chaos.step", JSON: []byte(args)}
}

// produceWorkflows inserts the shapes at the start of the window (each
// workflow in a transaction of its own, retried with its id until it
// commits: the id makes a retry after an ambiguous failure return the
// first), then, two seconds in, cancels the diamonds it means to cancel.
func (s *suite) produceWorkflows(ctx context.Context, sh wfShapes, r *wfRun) {
	ins, err := jobs.NewInserter(s.jobPool)
	if err != nil {
		r.err = err
		return
	}
	insert := func(wf *workflow.Workflow) {
		for ctx.Err() == nil {
			err := pgx.BeginFunc(ctx, s.jobPool, func(tx pgx.Tx) error {
				_, err := workflow.InsertTx(ctx, tx, ins, wf)
				return err
			})
			if err == nil {
				r.mu.Lock()
				r.inserted = append(r.inserted, wf.ID)
				r.mu.Unlock()
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	diamond := func(id string, bSleepMS int) *workflow.Workflow {
		wf := workflow.New("diamond")
		wf.ID = id
		wf.Add("a", step(sh.sleepMS)).Add("b", step(bSleepMS), workflow.After("a")).Add("c", step(sh.sleepMS), workflow.After("a"))
		wf.Add("d", step(sh.sleepMS), workflow.After("b", "c"))
		return wf
	}
	for i := range sh.diamonds {
		insert(diamond(fmt.Sprintf("diamond-%d", i), sh.sleepMS*10))
	}
	// The ones to cancel: b runs long enough to be running at the cancel.
	for i := range sh.cancelled {
		insert(diamond(fmt.Sprintf("cancelled-%d", i), 60_000))
	}
	for i := range sh.fans {
		wf := workflow.New("fan")
		wf.ID = fmt.Sprintf("fan-%d", i)
		wf.Add("root", step(sh.sleepMS))
		leaves := make([]string, sh.fanWidth)
		for j := range leaves {
			leaves[j] = fmt.Sprintf("leaf-%d", j)
			wf.Add(leaves[j], step(sh.sleepMS), workflow.After("root"))
		}
		wf.Add("join", step(sh.sleepMS), workflow.After(leaves...))
		insert(wf)
	}
	for i := range sh.chains {
		wf := workflow.New("chain")
		wf.ID = fmt.Sprintf("chain-%d", i)
		wf.Add("0", step(sh.sleepMS))
		for j := 1; j < sh.chainLength; j++ {
			wf.Add(fmt.Sprint(j), step(sh.sleepMS), workflow.After(fmt.Sprint(j-1)))
		}
		insert(wf)
	}
	for i := range sh.adders {
		added := make([]string, sh.addWidth)
		for j := range added {
			added[j] = fmt.Sprintf("found-%d", j)
		}
		wf := workflow.New("fan-out at run time")
		wf.ID = fmt.Sprintf("adder-%d", i)
		wf.Add("scan", step(sh.sleepMS, added...))
		wf.Add("report", step(sh.sleepMS), workflow.AfterAllAddedBy("scan"))
		insert(wf)
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(2 * time.Second):
	}
	r.mu.Lock()
	r.cancelled = map[string]time.Time{}
	r.mu.Unlock()
	for i := range sh.cancelled {
		id := fmt.Sprintf("cancelled-%d", i)
		for ctx.Err() == nil {
			err := pgx.BeginFunc(ctx, s.jobPool, func(tx pgx.Tx) error { return workflow.CancelTx(ctx, tx, id) })
			if errors.Is(err, workflow.ErrFinished) {
				// An earlier try committed and its reply was lost, or the
				// workflow had ended: only a cancelled one counts.
				var state string
				if qerr := s.pool.QueryRow(ctx, `SELECT state FROM ferry_workflow WHERE id = $1`, id).Scan(&state); qerr != nil || state != "cancelled" {
					r.mu.Lock()
					r.err = fmt.Errorf("cancel %s: %w (%s)", id, err, state)
					r.mu.Unlock()
					break
				}
				err = nil
			}
			if err == nil {
				// Committed: every step fetched from now on is a violation.
				r.mu.Lock()
				r.cancelled[id] = time.Now()
				r.mu.Unlock()
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// wfObs is what the oracle reads of the workflows.
type wfObs struct {
	run         *wfRun
	states      map[string]string // workflow → state
	notDone     []string          // steps of workflows not cancelled that did not complete
	violations  []string          // a step started before a dependency completed, or without an output
	afterCancel []string          // steps of a cancelled workflow fetched after the cancel
	starts      int
	err         error
}

func observeWorkflows(ctx context.Context, pool *pgxpool.Pool, r *wfRun) wfObs {
	o := wfObs{run: r, states: map[string]string{}}
	rows, _ := pool.Query(ctx, `SELECT id, state FROM ferry_workflow`)
	var id, state string
	if _, err := pgx.ForEachRow(rows, []any{&id, &state}, func() error { o.states[id] = state; return nil }); err != nil {
		o.err = err
		return o
	}
	rows, _ = pool.Query(ctx, `SELECT s.workflow_id || '/' || s.name || ' ' || coalesce(j.state::text, 'deleted')
FROM ferry_workflow_step s JOIN ferry_workflow w ON w.id = s.workflow_id
LEFT JOIN river_job j ON j.id = s.job_id
WHERE w.cancelled_at IS NULL AND j.state IS DISTINCT FROM 'completed' ORDER BY 1 LIMIT 20`)
	if o.notDone, o.err = pgx.CollectRows(rows, pgx.RowTo[string]); o.err != nil {
		return o
	}
	rows, _ = pool.Query(ctx, `SELECT workflow || '/' || step || format(' (%s dependencies open, %s outputs missing)', open_deps, outputs_missing)
FROM chaos_wf_violation ORDER BY 1 LIMIT 20`)
	if o.violations, o.err = pgx.CollectRows(rows, pgx.RowTo[string]); o.err != nil {
		return o
	}
	if o.err = pool.QueryRow(ctx, `SELECT count(*) FROM chaos_wf_start`).Scan(&o.starts); o.err != nil {
		return o
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for wid, at := range r.cancelled {
		rows, _ := pool.Query(ctx, `SELECT s.name FROM ferry_workflow_step s JOIN river_job j ON j.id = s.job_id
WHERE s.workflow_id = $1 AND j.attempted_at > $2`, wid, at)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			o.err = err
			return o
		}
		for _, n := range names {
			o.afterCancel = append(o.afterCancel, wid+"/"+n)
		}
	}
	return o
}

// checkWorkflows: every workflow the producer inserted ended, in the state
// its steps imply (cancelled for those it cancelled, completed for the
// rest, every step of those completed); no step started before each of
// its dependencies had completed, or missed a completed dependency's
// output (seen from inside the step); no step of a cancelled workflow was
// fetched after its cancel committed. Nothing inserted, or no step
// started, is unverified.
func checkWorkflows(sh wfShapes, o wfObs) check {
	if o.err != nil {
		return newCheck(nameWorkflows, verdictUnverified, "query failed: %v", o.err)
	}
	r := o.run
	r.mu.Lock()
	defer r.mu.Unlock()
	want := sh.diamonds + sh.cancelled + sh.fans + sh.chains + sh.adders
	if r.err != nil || len(r.inserted) != want || o.starts == 0 || len(r.cancelled) != sh.cancelled {
		return newCheck(nameWorkflows, verdictUnverified, "%d of %d workflows inserted (%v), %d of %d cancelled, %d steps started",
			len(r.inserted), want, r.err, len(r.cancelled), sh.cancelled, o.starts)
	}
	var wrong []string
	for _, id := range r.inserted {
		want := "completed"
		if _, ok := r.cancelled[id]; ok {
			want = "cancelled"
		}
		if o.states[id] != want {
			wrong = append(wrong, fmt.Sprintf("%s %s, not %s", id, o.states[id], want))
		}
	}
	if len(wrong) > 0 || len(o.notDone) > 0 || len(o.violations) > 0 || len(o.afterCancel) > 0 {
		return newCheck(nameWorkflows, verdictViolated, "workflows in the wrong state %v; steps not completed %v; started early or without an output %v; fetched after their workflow's cancel %v",
			wrong, o.notDone, o.violations, o.afterCancel)
	}
	return newCheck(nameWorkflows, verdictOK, "%d workflows (%d diamonds, %d fan-outs of %d, %d chains of %d, %d adding %d at run time, %d cancelled mid-way), %d step starts: each after its dependencies, every output read",
		len(r.inserted), sh.diamonds, sh.fans, sh.fanWidth, sh.chains, sh.chainLength, sh.adders, sh.addWidth, sh.cancelled, o.starts)
}
