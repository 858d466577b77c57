package jobs

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

var queueNameRE = regexp.MustCompile(`^[a-z0-9]+(?:[_|-]?[a-z0-9]+)*$`)

// ValidateQueueName checks a queue name against River's rules: 1 to 64
// lowercase letters and digits, separated by single _, - or |.
func ValidateQueueName(name string) error {
	if len(name) > 64 || !queueNameRE.MatchString(name) {
		return fmt.Errorf("queue %q: a name is 1 to 64 lowercase letters and digits, separated by single _ or -", name)
	}
	return nil
}

// Kind describes one job kind: its name (River's Kind()), the queue its jobs
// go to unless an insert says otherwise, a one-line description for
// operators, and how to add its worker to a river.Workers.
type Kind struct {
	Name        string
	Queue       string
	Description string
	// SensitiveErrors: only the type of the kind's errors is stored and
	// logged (the SensitiveErrors option).
	SensitiveErrors bool

	register func(w *river.Workers, wrap func(context.Context) context.Context) error
}

// Define makes a Kind from a River worker. The name is the args type's
// Kind(); the queue defaults to river.QueueDefault. Options: SensitiveErrors.
func Define[T river.JobArgs](worker river.Worker[T], queue, description string, opts ...KindOption) Kind {
	var zero T
	if queue == "" {
		queue = river.QueueDefault
	}
	k := Kind{
		Name:        zero.Kind(),
		Queue:       queue,
		Description: description,
		register: func(w *river.Workers, wrap func(context.Context) context.Context) error {
			if wrap == nil {
				return river.AddWorkerSafely(w, worker)
			}
			return river.AddWorkerSafely[T](w, &contextWorker[T]{Worker: worker, wrap: wrap})
		},
	}
	for _, opt := range opts {
		opt(&k)
	}
	return k
}

// Registry is the set of kinds one process works. The root package fills it
// from every capability (jobs, outbox …) and the user's own kinds.
type Registry struct {
	kinds []Kind
}

// Add adds kinds; a name registered twice, or a kind not made with Define,
// is an error and adds nothing.
func (r *Registry) Add(kinds ...Kind) error {
	seen := map[string]bool{}
	for _, k := range r.kinds {
		seen[k.Name] = true
	}
	for _, k := range kinds {
		if k.Name == "" || k.register == nil {
			return fmt.Errorf("jobs: kind %q was not made with jobs.Define", k.Name)
		}
		if seen[k.Name] {
			return fmt.Errorf("jobs: kind %q registered twice", k.Name)
		}
		seen[k.Name] = true
	}
	r.kinds = append(r.kinds, kinds...)
	return nil
}

// Get returns the kind named name.
func (r *Registry) Get(name string) (Kind, bool) {
	i := slices.IndexFunc(r.kinds, func(k Kind) bool { return k.Name == name })
	if i < 0 {
		return Kind{}, false
	}
	return r.kinds[i], true
}

// Sensitive says whether the kind named name declared its errors
// sensitive (SensitiveErrors).
func (r *Registry) Sensitive(name string) bool {
	k, ok := r.Get(name)
	return ok && k.SensitiveErrors
}

// Kinds returns the registered kinds in registration order.
func (r *Registry) Kinds() []Kind { return slices.Clone(r.kinds) }

// Queues returns the distinct queues of the registered kinds, sorted.
func (r *Registry) Queues() []string {
	var qs []string
	for _, k := range r.kinds {
		if !slices.Contains(qs, k.Queue) {
			qs = append(qs, k.Queue)
		}
	}
	slices.Sort(qs)
	return qs
}

// Workers returns a river.Workers holding every registered worker.
func (r *Registry) Workers() (*river.Workers, error) { return r.WorkersWith(nil) }

// WorkersWith is Workers whose every worker gets its context through wrap
// (when not nil): the innermost place a job's context can be reached, past
// every middleware and past River's job timeout, which River applies after
// the middleware. The worker process hands its liveness lease to each job
// this way.
func (r *Registry) WorkersWith(wrap func(context.Context) context.Context) (*river.Workers, error) {
	w := river.NewWorkers()
	for _, k := range r.kinds {
		if err := k.register(w, wrap); err != nil {
			return nil, fmt.Errorf("jobs: register %s: %w", k.Name, err)
		}
	}
	return w, nil
}

// Publish upserts every registered kind into ferry_job_kind, so that the
// enqueue CLI knows them. Workers call it at start.
func (r *Registry) Publish(ctx context.Context, db DBTX) error {
	if len(r.kinds) == 0 {
		return nil
	}
	var names, queues, descs []string
	for _, k := range r.kinds {
		names, queues, descs = append(names, k.Name), append(queues, k.Queue), append(descs, k.Description)
	}
	_, err := db.Exec(ctx, `
		INSERT INTO ferry_job_kind (kind, queue, description, updated_at)
		SELECT * , now() FROM unnest($1::text[], $2::text[], $3::text[])
		ON CONFLICT (kind) DO UPDATE
		SET queue = excluded.queue, description = excluded.description, updated_at = excluded.updated_at`,
		names, queues, descs)
	if err != nil {
		return fmt.Errorf("jobs: publish kinds to ferry_job_kind: %w", err)
	}
	return nil
}

// Known is what an inserter knows about a kind it did not register itself.
type Known struct {
	Name        string `json:"kind"`
	Queue       string `json:"queue"`
	Description string `json:"description"`
	Builtin     bool   `json:"builtin"`
}

// Lookup finds a kind among ferry's built-in kinds and, failing that, in
// ferry_job_kind (kinds some worker has registered). ok is false when
// neither knows it.
func Lookup(ctx context.Context, db DBTX, name string) (k Known, ok bool, err error) {
	for _, b := range Builtin() {
		if b.Name == name {
			return Known{Name: b.Name, Queue: b.Queue, Description: b.Description, Builtin: true}, true, nil
		}
	}
	err = db.QueryRow(ctx, "SELECT kind, queue, description FROM ferry_job_kind WHERE kind = $1", name).
		Scan(&k.Name, &k.Queue, &k.Description)
	if errors.Is(err, pgx.ErrNoRows) {
		return Known{}, false, nil
	}
	if err != nil {
		return Known{}, false, fmt.Errorf("jobs: look up kind %q: %w", name, err)
	}
	return k, true, nil
}

// contextWorker is a worker whose Work gets its context through wrap
// (WorkersWith); everything else is the worker's own.
type contextWorker[T river.JobArgs] struct {
	river.Worker[T]
	wrap func(context.Context) context.Context
}

func (w *contextWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return w.Worker.Work(w.wrap(ctx), job)
}
