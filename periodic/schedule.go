package periodic

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/riverqueue/river"
)

// CatchUp says what a new leader does with ticks missed while no leader ran.
type CatchUp string

// CatchUp values.
const (
	// CatchUpLast enqueues the latest missed tick if it lies within the
	// schedule's misfire window; older missed ticks are recorded as skipped.
	CatchUpLast CatchUp = "last"
	// CatchUpNone records every missed tick as skipped.
	CatchUpNone CatchUp = "none"
)

// Overlap says what a tick does while the previous tick's job is unfinished.
type Overlap string

// Overlap values.
const (
	// OverlapSkip records the tick as skipped.
	OverlapSkip Overlap = "skip"
	// OverlapAllow enqueues the tick's job anyway.
	OverlapAllow Overlap = "allow"
)

// Schedule is one periodic entry. Durable schedules (the default) enqueue a
// River job per tick, on the leader only, exactly once across replicas.
// Local schedules run a function in every process on an in-process timer.
type Schedule struct {
	// ID is the stable key of the schedule's ticks in ferry_periodic_tick:
	// renaming it starts a new history. Letters, digits and _.:- up to 128.
	ID string
	// Name is what operators and monitors see (the "periodic: tick enqueued"
	// log line, ferry_schedule); keep it stable. Defaults to ID.
	Name string
	// Trigger says when the schedule fires (Every, ParseCron).
	Trigger Trigger

	// Args is the job each tick enqueues; its Kind() is the job's kind.
	Args river.JobArgs
	// InsertOpts are the job's insert options (queue, priority, max
	// attempts…); may be nil.
	InsertOpts *river.InsertOpts
	// CatchUp defaults to CatchUpLast.
	CatchUp CatchUp
	// Misfire is how old the latest missed tick may be for CatchUpLast to
	// still enqueue it; defaults to the trigger's Interval.
	Misfire time.Duration
	// Overlap defaults to OverlapSkip.
	Overlap Overlap

	// Local makes the schedule run Run in every process, from an
	// in-process timer: not leader-gated, not durable, nothing in the
	// database. For what each process keeps in memory.
	Local bool
	// Run is the local schedule's work; its context is cancelled when the
	// process stops.
	Run func(ctx context.Context) error
}

var idRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// withDefaults fills Name, CatchUp, Misfire and Overlap.
func (s Schedule) withDefaults() Schedule {
	if s.Name == "" {
		s.Name = s.ID
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpLast
	}
	if s.Overlap == "" {
		s.Overlap = OverlapSkip
	}
	if s.Misfire == 0 && s.Trigger != nil {
		s.Misfire = s.Trigger.Interval()
	}
	return s
}

// validate checks one schedule; errors name the field.
func (s Schedule) validate() error {
	if !idRE.MatchString(s.ID) {
		return fmt.Errorf("id %q: 1 to 128 letters, digits or _.:-", s.ID)
	}
	if s.Trigger == nil {
		return errors.New("trigger: none given (every or cron)")
	}
	if s.Local {
		if s.Run == nil {
			return errors.New("run: a local schedule needs a Run function")
		}
		if s.Args != nil {
			return errors.New("args: a local schedule runs Run, it enqueues no job")
		}
		return nil
	}
	if s.Args == nil {
		return errors.New("args: a durable schedule needs the job to enqueue")
	}
	if s.Run != nil {
		return errors.New("run: only local schedules run a function; durable ones enqueue Args")
	}
	switch s.CatchUp {
	case CatchUpLast, CatchUpNone:
	default:
		return fmt.Errorf("catch_up %q: want last or none", s.CatchUp)
	}
	switch s.Overlap {
	case OverlapSkip, OverlapAllow:
	default:
		return fmt.Errorf("overlap %q: want skip or allow", s.Overlap)
	}
	if s.Misfire < 0 {
		return fmt.Errorf("misfire %s: must not be negative", s.Misfire)
	}
	return nil
}

// queue is the queue the schedule's jobs go to.
func (s Schedule) queue() string {
	if s.InsertOpts != nil && s.InsertOpts.Queue != "" {
		return s.InsertOpts.Queue
	}
	if a, ok := s.Args.(river.JobArgsWithInsertOpts); ok {
		if q := a.InsertOpts().Queue; q != "" {
			return q
		}
	}
	return river.QueueDefault
}

// ScheduleError is an invalid schedule given to ValidateSchedules:
// `schedule 2 (id "nightly"): catch_up "all": want last or none`.
type ScheduleError struct {
	Index int    // the schedule's position in the slice
	ID    string // its ID, as given
	Err   error  // what is wrong, naming the field: `catch_up "all": want last or none`
}

func (e *ScheduleError) Error() string {
	return fmt.Sprintf("schedule %d (id %q): %v", e.Index, e.ID, e.Err)
}

func (e *ScheduleError) Unwrap() error { return e.Err }

// ValidateSchedules fills defaults and checks a set of schedules: each one,
// and that no two share an ID. It returns the schedules with defaults. An
// invalid schedule is a *ScheduleError.
func ValidateSchedules(in []Schedule) ([]Schedule, error) {
	out := make([]Schedule, 0, len(in))
	seen := map[string]int{}
	for i, s := range in {
		s = s.withDefaults()
		if err := s.validate(); err != nil {
			return nil, &ScheduleError{Index: i, ID: s.ID, Err: err}
		}
		if j, dup := seen[s.ID]; dup {
			return nil, &ScheduleError{Index: i, ID: s.ID, Err: fmt.Errorf("id: already used by schedule %d", j)}
		}
		seen[s.ID] = i
		out = append(out, s)
	}
	return out, nil
}
