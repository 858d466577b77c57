package workflowcap

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"
)

// EagerCompletions is how many completions of steps one process commits
// at once on its own (eager); a step that ends while that many are in
// flight is left to River's completer.
const EagerCompletions = 4

// eagerBelow is the rate, in steps ended per eagerWindow in this process,
// from which eager completion stands aside: River's completer commits
// its batch on each 50 ms tick once 100 completions wait, so above this
// rate it is as prompt as an eager commit and costs far less (one
// statement, and one release pass of the trigger, for the whole batch;
// measured: the layered DAG of the bench ran at 0.35 of plain jobs with
// every step eager, 0.46 with none).
const (
	eagerBelow  = 10
	eagerWindow = 50 * time.Millisecond
)

// stepKey is how the metadata of a workflow's step names its workflow.
var stepKey = []byte(`"ferry_workflow"`)

// eager completes a workflow step as soon as its worker returns, in a
// transaction of its own (River's JobCompleteTx, which keeps the output
// the step recorded), so that the steps that wait for it are released at
// once: River's completer batches completions and, below 100 waiting,
// commits them every 250 ms, which a chain of steps would pay at each
// link. At most EagerCompletions at a time, and only while no more than
// eagerBelow steps end per eagerWindow: under load River's completer
// fills its batches and commits them as they fill, and takes the rest.
// When the eager completion fails, River's completer completes the job,
// as it would have.
//
// It is also where a released step's start delay is observed: the one
// middleware of workflows, so that a job that is no step costs one
// bytes.Contains.
type eager struct {
	river.MiddlewareDefaults
	pool  *pgxpool.Pool
	slots chan struct{}
	done  *prometheus.CounterVec
	delay prometheus.Histogram // nil observes nothing

	mu     sync.Mutex
	since  time.Time // the current window's start
	now    int       // steps ended in the current window
	before int       // and in the one before it
}

func newEager(pool *pgxpool.Pool, delay prometheus.Histogram) *eager {
	return &eager{pool: pool, slots: make(chan struct{}, EagerCompletions), delay: delay,
		done: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_workflow_step_completions_total",
			Help: "Completions of workflow steps this process worked, by who committed them: eager (at once, in a transaction of its own) or river (River's batching completer: all eager slots were busy, or the eager one failed).",
		}, []string{"by"}),
	}
}

// stepRow decodes nothing: JobCompleteTx wants a typed job.
type stepRow struct{}

func (stepRow) Kind() string                { return "" }
func (*stepRow) UnmarshalJSON([]byte) error { return nil }

func (e *eager) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if !bytes.Contains(job.Metadata, stepKey) {
		return doInner(ctx)
	}
	e.observeDelay(job)
	if err := doInner(ctx); err != nil {
		return err
	}
	if e.busy(time.Now()) {
		e.done.WithLabelValues("river").Inc()
		return nil
	}
	select {
	case e.slots <- struct{}{}:
	default:
		e.done.WithLabelValues("river").Inc()
		return nil
	}
	defer func() { <-e.slots }()
	// The job's context, uncancelled: its values hold the client and the
	// output the step recorded.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := pgx.BeginFunc(cctx, e.pool, func(tx pgx.Tx) error {
		_, err := river.JobCompleteTx[riverdriver.Driver[pgx.Tx]](cctx, tx, &river.Job[stepRow]{JobRow: job})
		return err
	})
	if err != nil {
		e.done.WithLabelValues("river").Inc()
		return nil
	}
	e.done.WithLabelValues("eager").Inc()
	return nil
}

// busy counts a step that ended at t and tells whether this process's
// steps end too fast for eager completion to pay: more than eagerBelow
// in this window and the one before it.
func (e *eager) busy(t time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch d := t.Sub(e.since); {
	case d >= 2*eagerWindow:
		e.since, e.now, e.before = t, 0, 0
	case d >= eagerWindow:
		e.since, e.now, e.before = e.since.Add(eagerWindow), 0, e.now
	}
	e.now++
	return e.now+e.before > eagerBelow
}

// observeDelay observes a released step's start delay: from the release
// (the database's clock, in the releasing transaction) to its fetch
// (attempted_at, the database's clock too), on its first attempt.
func (e *eager) observeDelay(job *rivertype.JobRow) {
	if e.delay == nil || job.Attempt != 1 || job.AttemptedAt == nil {
		return
	}
	var m struct {
		ReadyAt time.Time `json:"ferry_ready_at"`
	}
	if json.Unmarshal(job.Metadata, &m) == nil && !m.ReadyAt.IsZero() {
		e.delay.Observe(max(0, job.AttemptedAt.Sub(m.ReadyAt).Seconds()))
	}
}
