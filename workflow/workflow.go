package workflow

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/riverqueue/river"
)

// MaxSteps is the most steps one workflow holds, its run-time additions
// included.
const MaxSteps = 100_000

// maxName is the longest workflow id, workflow name or step name, in bytes.
const maxName = 200

// A Workflow is a named DAG of steps, each a River job, built with Add and
// inserted whole with InsertTx. Its zero value is not usable: make one
// with New.
type Workflow struct {
	// ID makes the insert idempotent: a second InsertTx of a workflow with
	// the same ID inserts nothing and returns the first (Result.Existing).
	// Empty, InsertTx gives the workflow a new id.
	ID string
	// Name says what the workflow is, for the console and the CLI ("order
	// 1234", "nightly import").
	Name string

	steps []Step
	index map[string]int
	err   error
}

// Step is one step of a workflow: a River job of any registered kind, and
// the names of the steps whose completion it waits for.
type Step struct {
	// Name is unique within the workflow: the key of its dependencies and
	// of its output.
	Name string
	// Args are the job's args; its kind is Args.Kind().
	Args river.JobArgs
	// Opts are the job's insert options (queue, priority, max attempts,
	// tags, metadata, a ScheduledAt that delays it past its release). nil
	// takes the kind's own (JobArgsWithInsertOpts) and River's defaults.
	// Pending and UniqueOpts are the workflow's to set: they are refused.
	Opts *river.InsertOpts
	// DependsOn names the steps this one waits for.
	DependsOn []string
	// IgnoreFailedDeps runs the step when every dependency has ended, even
	// when one was discarded or cancelled; by default such a failure
	// cancels the step and every step downstream of it.
	IgnoreFailedDeps bool
	// AfterAllAddedBy names a step (among DependsOn, added to it if not)
	// whose run-time additions this step waits for too: every step that
	// step adds with AddTx, and every step those add, in turn (a fan-in
	// after a fan-out found at run time).
	AfterAllAddedBy string

	mode string // "all", or "any_failed" for a batch's failure callback
}

// Option sets one of a step's fields in Add.
type Option func(*Step)

// After makes the step wait for the named steps to complete.
func After(steps ...string) Option {
	return func(s *Step) { s.DependsOn = append(s.DependsOn, steps...) }
}

// WithOpts gives the step's job these insert options.
func WithOpts(opts *river.InsertOpts) Option { return func(s *Step) { s.Opts = opts } }

// IgnoreFailedDeps runs the step once its dependencies have ended, whether
// they completed or not.
func IgnoreFailedDeps() Option { return func(s *Step) { s.IgnoreFailedDeps = true } }

// AfterAllAddedBy makes the step wait for step and for every step added at
// run time under it (Step.AfterAllAddedBy).
func AfterAllAddedBy(step string) Option {
	return func(s *Step) { s.AfterAllAddedBy = step }
}

// New returns an empty workflow called name.
func New(name string) *Workflow {
	return &Workflow{Name: name, index: map[string]int{}}
}

// Add adds a step called name that runs args, and returns the workflow,
// so that steps chain. A mistake (a duplicate name, an empty one) is kept
// and returned by InsertTx, with the others Validate finds.
func (w *Workflow) Add(name string, args river.JobArgs, opts ...Option) *Workflow {
	s := Step{Name: name, Args: args}
	for _, o := range opts {
		o(&s)
	}
	return w.AddStep(s)
}

// AddStep adds s, as Add does.
func (w *Workflow) AddStep(s Step) *Workflow {
	if w.index == nil {
		w.index = map[string]int{}
	}
	if _, dup := w.index[s.Name]; dup {
		if w.err == nil {
			w.err = &DuplicateStepError{Step: s.Name}
		}
		return w
	}
	w.index[s.Name] = len(w.steps)
	w.steps = append(w.steps, s)
	return w
}

// Steps returns the steps in the order they were added.
func (w *Workflow) Steps() []Step { return slices.Clone(w.steps) }

// Errors of Validate, each a type of its own so that a caller (the CLI, a
// service's API) can say which rule a workflow broke.
var (
	// ErrEmpty is a workflow without steps.
	ErrEmpty = errors.New("workflow: no steps")
	// ErrNotFound is a workflow id, or a step name, that no workflow has.
	ErrNotFound = errors.New("workflow: not found")
	// ErrFinished is a change to a workflow that has ended (AddTx to a
	// finished or cancelled workflow, CancelTx of a finished one).
	ErrFinished = errors.New("workflow: finished")
	// ErrNotAStep is a job that is not a step of a workflow (AddTx,
	// Output from a job that is not a step).
	ErrNotAStep = errors.New("workflow: the job is not a step of a workflow")
	// ErrNoOutput is a dependency that has not completed, or completed
	// without recording an output (river.RecordOutput).
	ErrNoOutput = errors.New("workflow: no output")
)

// DuplicateStepError is a step name used twice in one workflow.
type DuplicateStepError struct{ Step string }

func (e *DuplicateStepError) Error() string {
	return fmt.Sprintf("workflow: step %q is added twice", e.Step)
}

// UnknownDependencyError is a step that depends on a step the workflow does
// not have.
type UnknownDependencyError struct{ Step, Dependency string }

func (e *UnknownDependencyError) Error() string {
	return fmt.Sprintf("workflow: step %q depends on %q, which the workflow does not have", e.Step, e.Dependency)
}

// CycleError is a cycle of dependencies, named in order: Cycle[0] depends
// on Cycle[1], …, and the last on Cycle[0].
type CycleError struct{ Cycle []string }

func (e *CycleError) Error() string {
	return fmt.Sprintf("workflow: cycle: %s → %s", strings.Join(e.Cycle, " → "), e.Cycle[0])
}

// TooManyStepsError is a workflow of more than MaxSteps steps.
type TooManyStepsError struct{ Steps int }

func (e *TooManyStepsError) Error() string {
	return fmt.Sprintf("workflow: %d steps, more than the %d a workflow may have", e.Steps, MaxSteps)
}

// StepError is a step that is not well formed: no name, no args, insert
// options the workflow sets itself.
type StepError struct {
	Step string
	Err  string
}

func (e *StepError) Error() string {
	if e.Step == "" {
		return "workflow: step: " + e.Err
	}
	return fmt.Sprintf("workflow: step %q: %s", e.Step, e.Err)
}

// Validate checks the workflow as InsertTx does, without a database: one
// error, the first found, of the types above.
func (w *Workflow) Validate() error {
	if w.err != nil {
		return w.err
	}
	if err := checkName("workflow name", w.Name); err != nil {
		return err
	}
	if w.ID != "" {
		if err := checkName("workflow id", w.ID); err != nil {
			return err
		}
	}
	if len(w.steps) == 0 {
		return ErrEmpty
	}
	if len(w.steps) > MaxSteps {
		return &TooManyStepsError{Steps: len(w.steps)}
	}
	known := func(name string) bool { _, ok := w.index[name]; return ok }
	if err := checkSteps(w.steps, known); err != nil {
		return err
	}
	_, err := order(w.steps, w.index)
	return err
}

// checkSteps checks each step on its own, and that its dependencies are
// known.
func checkSteps(steps []Step, known func(string) bool) error {
	for i := range steps {
		s := &steps[i]
		if err := checkName("step name", s.Name); err != nil {
			return &StepError{Step: s.Name, Err: err.Error()}
		}
		if s.Args == nil {
			return &StepError{Step: s.Name, Err: "no args"}
		}
		if s.Opts != nil && s.Opts.Pending {
			return &StepError{Step: s.Name, Err: "InsertOpts.Pending is the workflow's to set"}
		}
		if s.Opts != nil && !reflect.ValueOf(s.Opts.UniqueOpts).IsZero() {
			return &StepError{Step: s.Name, Err: "InsertOpts.UniqueOpts: a step is unique by its workflow and name"}
		}
		if s.AfterAllAddedBy != "" && !slices.Contains(s.DependsOn, s.AfterAllAddedBy) {
			s.DependsOn = append(slices.Clip(s.DependsOn), s.AfterAllAddedBy)
		}
		seen := make(map[string]bool, len(s.DependsOn))
		for _, d := range s.DependsOn {
			if d == s.Name {
				return &CycleError{Cycle: []string{s.Name}}
			}
			if !known(d) {
				return &UnknownDependencyError{Step: s.Name, Dependency: d}
			}
			if seen[d] {
				return &StepError{Step: s.Name, Err: fmt.Sprintf("depends on %q twice", d)}
			}
			seen[d] = true
		}
	}
	return nil
}

func checkName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("workflow: empty %s", what)
	case len(s) > maxName:
		return fmt.Errorf("workflow: %s of %d bytes, more than %d", what, len(s), maxName)
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return fmt.Errorf("workflow: %s %q has a control character", what, s)
	}
	return nil
}

// order returns the steps' indexes in an order where each step comes after
// its dependencies within steps (dependencies outside steps, on steps a
// workflow already has, impose nothing), or the CycleError of a cycle.
// Kahn's algorithm, stable: steps come in the order they were added where
// the dependencies allow.
func order(steps []Step, index map[string]int) ([]int, error) {
	indegree := make([]int, len(steps))
	dependents := make([][]int, len(steps))
	for i, s := range steps {
		for _, d := range s.DependsOn {
			if j, ok := index[d]; ok {
				indegree[i]++
				dependents[j] = append(dependents[j], i)
			}
		}
	}
	out := make([]int, 0, len(steps))
	for i := range steps {
		if indegree[i] == 0 {
			out = append(out, i)
		}
	}
	for k := 0; k < len(out); k++ {
		for _, i := range dependents[out[k]] {
			if indegree[i]--; indegree[i] == 0 {
				out = append(out, i)
			}
		}
	}
	if len(out) == len(steps) {
		return out, nil
	}
	return nil, &CycleError{Cycle: findCycle(steps, index, indegree)}
}

// findCycle walks, from a step left in a cycle or behind one, to the
// dependency of each step that is also left, until a step repeats: the
// steps from its first visit on are a cycle.
func findCycle(steps []Step, index map[string]int, indegree []int) []string {
	start := slices.IndexFunc(indegree, func(n int) bool { return n > 0 })
	at := map[int]int{}
	var path []string
	for i := start; ; {
		if k, ok := at[i]; ok {
			return path[k:]
		}
		at[i] = len(path)
		path = append(path, steps[i].Name)
		for _, d := range steps[i].DependsOn {
			if j, ok := index[d]; ok && indegree[j] > 0 {
				i = j
				break
			}
		}
	}
}
