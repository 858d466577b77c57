package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/riverqueue/river"
)

// NoopArgs are the args of ferry.noop, a job that does nothing (or sleeps),
// for smoke tests, benchmarks and drills.
type NoopArgs struct {
	// Sleep, when set, makes the job wait this long (or until cancelled) before
	// it completes. A cancelled sleep returns the context's error, so a
	// shutdown puts the job back to available.
	Sleep Duration `json:"sleep,omitempty"`
}

// Kind implements river.JobArgs.
func (NoopArgs) Kind() string { return "ferry.noop" }

// NoopWorker works ferry.noop.
type NoopWorker struct {
	river.WorkerDefaults[NoopArgs]
}

// Work implements river.Worker.
func (w *NoopWorker) Work(ctx context.Context, job *river.Job[NoopArgs]) error {
	if job.Args.Sleep <= 0 {
		return nil
	}
	t := time.NewTimer(time.Duration(job.Args.Sleep))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ferry.noop: sleep of %s cut short: %w", time.Duration(job.Args.Sleep), context.Cause(ctx))
	}
}

// Duration is a time.Duration that reads and writes JSON as a Go duration
// string ("1.5s", "10m"); it also reads a bare number as seconds.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil // as encoding/json does for a plain value: no effect
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var secs float64
		if err2 := json.Unmarshal(b, &secs); err2 != nil {
			return fmt.Errorf("duration: want a string like \"30s\" or a number of seconds, got %s", b)
		}
		*d = Duration(secs * float64(time.Second))
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	*d = Duration(v)
	return nil
}
