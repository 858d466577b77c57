package queuecap

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// Defaults. The fetch settings were chosen from measurements
// (docs/tuning.md): River's own defaults (100 ms cooldown, 1 s poll) cap each
// queue at about MaxWorkers jobs per 100 ms and put pickup p99 near
// 100 ms.
const (
	// DefaultWorkers are the queues a worker works by default: see
	// docs/tuning.md for the measurement behind 1,000.
	DefaultWorkers = "default=1000,outbox=50"
	// DefaultFetchCooldown is River's least (river.FetchCooldownMin): with
	// the inserters' 1 ms notifications (jobs.InsertNotifyCooldown), pickup
	// at 500 jobs/s measured p50 1.5 to 1.6 ms and p99 5.7 to 6.0 ms
	// against 4.5 ms and 9.1 to 9.4 ms at 5 ms, and a backlog ran no slower
	// (docs/tuning.md). It bounds a replica's fetches of a queue at 1,000
	// a second while inserts notify or, under a backlog, workers free up
	// (200 at 5 ms); idle, the poll's 10 a second.
	DefaultFetchCooldown     = river.FetchCooldownMin
	DefaultFetchPollInterval = 100 * time.Millisecond
	DefaultJobTimeout        = time.Minute
	DefaultShutdownGrace     = 25 * time.Second
	// MaxWorkersPerQueue bounds one queue's workers in one process.
	MaxWorkersPerQueue = 10_000
)

// Section is the configuration of the queues a worker works
// (ferry.Config's Queues): their worker counts and bounds, and how River
// fetches and times their jobs.
type Section struct {
	// Workers maps each queue this process works to its worker count.
	// With "outbox", the process delivers its outbox routes, each from a
	// queue of its own (ferry.RouteWorkers). The config file's `queues:`
	// entries add to it.
	Workers Workers `env:"FERRY_QUEUES" flag:"queues" file:"queues[].workers" usage:"queues to work and their worker counts, name=workers,…"`
	// MaxLength is the bound of every queue this process works (its
	// Workers and its outbox routes' queues) that MaxLengths does not
	// bound; 0, the default, is unbounded. A worker records its bounds in
	// ferry_queue at start, and the last worker started wins (see package
	// jobs, "Bounded queues").
	MaxLength int64 `env:"FERRY_QUEUE_MAX_LENGTH" flag:"queue-max-length" usage:"the bound of every queue this process works that the config file's queues: does not bound; 0 is unbounded"`
	// MaxLengths bounds queues one by one (0 is unbounded); the config
	// file's `queues:` entries add to it.
	MaxLengths map[string]int64 `file:"queues[].max_length" usage:"the bound of one queue; 0 is unbounded"`
	// FetchCooldown is the least time between two fetches of one queue; it
	// caps a queue at about its workers' count of jobs per cooldown.
	FetchCooldown time.Duration `env:"FERRY_FETCH_COOLDOWN" flag:"fetch-cooldown" usage:"least time between two fetches of one queue"`
	// FetchPollInterval is the fallback poll when no insert notification
	// arrives.
	FetchPollInterval time.Duration `env:"FERRY_FETCH_POLL_INTERVAL" flag:"fetch-poll-interval" usage:"fallback poll of each queue when no insert notification arrives"`
	// JobTimeout is the default time a job may run before its context is
	// cancelled (a kind may set its own); -1 is none.
	JobTimeout time.Duration `env:"FERRY_JOB_TIMEOUT" flag:"job-timeout" usage:"default time a job may run before its context is cancelled"`
	// ShutdownGrace is how long a stopping worker lets running jobs finish
	// before it cancels them. A cancelled job goes back to available, its
	// interrupted attempt uncounted; it is never lost.
	ShutdownGrace time.Duration `env:"FERRY_SHUTDOWN_GRACE" flag:"shutdown-grace" usage:"time running jobs get to finish on stop before they are cancelled (and retried)"`
	// PriorityAging, when set, lifts a waiting job one priority level per
	// period it has waited, up to level 1, in the order this process
	// fetches every queue's jobs (see aging.go); 0, the default, is off:
	// River's order, priority first.
	PriorityAging time.Duration `env:"FERRY_PRIORITY_AGING" flag:"priority-aging" usage:"a job that has waited this long is fetched as if one priority level higher, and one more per further period (up to 1); 0 is off"`
}

// MinPriorityAging is the shortest aging period: a shorter one would
// order the fetch by age alone.
const MinPriorityAging = time.Second

// Check returns what is wrong with a defaulted sec, one error each.
func (sec Section) Check() error {
	var errs []error
	if len(sec.Workers) == 0 {
		errs = append(errs, errors.New("queues: at least one queue is needed"))
	}
	for _, q := range slices.Sorted(maps.Keys(sec.Workers)) {
		if err := CheckQueue(q, sec.Workers[q]); err != nil {
			errs = append(errs, err)
		}
	}
	if sec.MaxLength < 0 {
		errs = append(errs, fmt.Errorf("queue max length %d is negative (0 is unbounded)", sec.MaxLength))
	}
	for _, q := range slices.Sorted(maps.Keys(sec.MaxLengths)) {
		if err := jobs.ValidateQueueName(q); err != nil {
			errs = append(errs, err)
		} else if sec.MaxLengths[q] < 0 {
			errs = append(errs, fmt.Errorf("queue %q: max length %d is negative (0 is unbounded)", q, sec.MaxLengths[q]))
		}
	}
	if sec.FetchCooldown < river.FetchCooldownMin {
		errs = append(errs, fmt.Errorf("fetch cooldown %s is below River's minimum %s", sec.FetchCooldown, river.FetchCooldownMin))
	}
	if sec.FetchPollInterval < sec.FetchCooldown {
		errs = append(errs, fmt.Errorf("fetch poll interval %s is below the fetch cooldown %s", sec.FetchPollInterval, sec.FetchCooldown))
	}
	if sec.JobTimeout < 0 && sec.JobTimeout != -1 {
		errs = append(errs, fmt.Errorf("job timeout %s is negative", sec.JobTimeout))
	}
	if sec.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("shutdown grace %s is negative", sec.ShutdownGrace))
	}
	if sec.PriorityAging != 0 && sec.PriorityAging < MinPriorityAging {
		errs = append(errs, fmt.Errorf("priority aging %s is below %s (0 is off)", sec.PriorityAging, MinPriorityAging))
	}
	return errors.Join(errs...)
}

// WithDefaults returns sec with every unset field at its default.
func (sec Section) WithDefaults() Section {
	if sec.Workers == nil {
		sec.Workers, _ = ParseWorkers(DefaultWorkers)
	}
	sec.FetchCooldown = cmp.Or(sec.FetchCooldown, DefaultFetchCooldown)
	sec.FetchPollInterval = cmp.Or(sec.FetchPollInterval, DefaultFetchPollInterval)
	sec.JobTimeout = cmp.Or(sec.JobTimeout, DefaultJobTimeout)
	sec.ShutdownGrace = cmp.Or(sec.ShutdownGrace, DefaultShutdownGrace)
	return sec
}

// CheckQueue checks one queue's name and worker count.
func CheckQueue(name string, workers int) error {
	if err := jobs.ValidateQueueName(name); err != nil {
		return err
	}
	if workers < 1 || workers > MaxWorkersPerQueue {
		return fmt.Errorf("queue %q: workers %d is not between 1 and %d", name, workers, MaxWorkersPerQueue)
	}
	return nil
}

// Workers maps queues to their worker counts; as text (FERRY_QUEUES),
// "name=workers,name=workers".
type Workers map[string]int

// ParseWorkers reads "name=workers,name=workers" (FERRY_QUEUES).
func ParseWorkers(s string) (Workers, error) {
	out := Workers{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, count, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("queues: %q is not name=workers", part)
		}
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if err != nil {
			return nil, fmt.Errorf("queues: %q: workers must be a whole number", part)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("queues: %q is listed twice", name)
		}
		if err := CheckQueue(name, n); err != nil {
			return nil, fmt.Errorf("queues: %w", err)
		}
		out[name] = n
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("queues: %q names no queue; want e.g. %q", s, DefaultWorkers)
	}
	return out, nil
}

// UnmarshalText reads w as ParseWorkers does.
func (w *Workers) UnmarshalText(text []byte) error {
	parsed, err := ParseWorkers(string(text))
	if err != nil {
		return err
	}
	*w = parsed
	return nil
}

// MarshalText writes w as FERRY_QUEUES says it, by queue name.
func (w Workers) MarshalText() ([]byte, error) {
	parts := make([]string, 0, len(w))
	for _, n := range slices.Sorted(maps.Keys(w)) {
		parts = append(parts, n+"="+strconv.Itoa(w[n]))
	}
	return []byte(strings.Join(parts, ",")), nil
}
