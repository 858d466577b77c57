package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/uniquestates"
	"github.com/riverqueue/river/rivertype"
)

// debounceMeta is the metadata key of a debounced insert.
const debounceMeta = "ferry_debounce"

// debounce is what a debounced insert carries in its metadata.
type debounce struct {
	Key       string `json:"key"`
	WindowMS  int64  `json:"window_ms"`
	MaxWaitMS int64  `json:"max_wait_ms,omitempty"`
}

// debounceStates are the states in which a job holds its debounce key:
// until it ends, another insert with the key is the same run's or the
// run after it.
var debounceStates = []rivertype.JobState{
	rivertype.JobStatePending, rivertype.JobStateScheduled, rivertype.JobStateAvailable,
	rivertype.JobStateRunning, rivertype.JobStateRetryable,
}

// WithDebounce returns opts (or new opts) debounced by key over window:
// inserts of one kind with the same key collapse into one job, which runs
// window after the last of them, with the last one's args; with maxWait
// (optional, 0 is none), no later than maxWait after the first, so that a
// constant stream of inserts still runs. An insert while the key's job
// runs (or waits to retry) schedules one run after it, window after the
// last such insert (and no later than maxWait after the first): a key's
// runs never overlap, and no insert is lost. The first insert of a run is
// scheduled window after it; each collapse moves the run on, by the
// database's clock.
//
// Only an Inserter's InsertTx and InsertManyTx debounce (the collapse is
// a write of their own in the caller's transaction); River's other insert
// APIs refuse a debounced insert that finds its key's job (the
// InsertManyFast paths refuse any duplicate, as River documents). A
// debounced insert cannot also have a unique key (WithUniqueKey).
//
// How it holds: the key is River's unique key (unique states pending,
// scheduled, available, running and retryable), so River's unique index
// decides which insert is first, and the database function ferry_debounce
// (migration 031) collapses the others into the job it found, or notes
// the run after it, which a trigger inserts in the transaction that ends
// the job.
func WithDebounce(opts *river.InsertOpts, key string, window time.Duration, maxWait ...time.Duration) *river.InsertOpts {
	d := debounce{Key: key, WindowMS: window.Milliseconds()}
	if len(maxWait) > 0 {
		d.MaxWaitMS = maxWait[0].Milliseconds()
	}
	return withMetadata(opts, debounceMeta, d)
}

// CheckDebounce says what is wrong with a debounce's key, window and
// maxWait (0: none), one error: what WithDebounce's insert refuses.
func CheckDebounce(key string, window, maxWait time.Duration) error {
	switch {
	case strings.TrimSpace(key) == "":
		return errors.New("jobs: debounce key is empty")
	case len(key) > 200:
		return fmt.Errorf("jobs: debounce key is %d bytes, over 200", len(key))
	case window < time.Millisecond:
		return fmt.Errorf("jobs: debounce window %s is under 1ms", window)
	case maxWait != 0 && maxWait < window:
		return fmt.Errorf("jobs: debounce max wait %s is under the window %s (0 is none)", maxWait, window)
	}
	return nil
}

// debounced reads the debounce of metadata: ok false when there is none,
// an error when it is malformed or has a unique key too.
func debounced(metadata []byte) (debounce, bool, error) {
	var meta map[string]json.RawMessage
	if len(metadata) == 0 || json.Unmarshal(metadata, &meta) != nil {
		return debounce{}, false, nil
	}
	raw, ok := meta[debounceMeta]
	if !ok {
		return debounce{}, false, nil
	}
	var d debounce
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, true, fmt.Errorf("jobs: debounce: %w", err)
	}
	if _, unique := meta[uniqueKeyMeta]; unique {
		return d, true, errors.New("jobs: a debounced insert cannot have a unique key too")
	}
	return d, true, CheckDebounce(d.Key, time.Duration(d.WindowMS)*time.Millisecond, time.Duration(d.MaxWaitMS)*time.Millisecond)
}

// debounceParams makes p, a debounced insert, hold its key: River's
// unique key and states, scheduled window from now.
func debounceParams(p *rivertype.JobInsertParams, d debounce) {
	sum := sha256.Sum256([]byte("ferry-debounce:" + p.Kind + ":" + d.Key))
	p.UniqueKey = sum[:]
	p.UniqueStates = uniquestates.UniqueStatesToBitmask(debounceStates)
	at := time.Now().Add(time.Duration(d.WindowMS) * time.Millisecond)
	p.ScheduledAt = &at
	p.State = rivertype.JobStateScheduled
}

// collapse is a debounced insert that found its key's job: the job, and
// the insert's args as River would have written them.
type collapse struct {
	job  int64
	args []byte
	d    debounce
}

// collapses gathers, in an Inserter's insert, the debounced inserts that
// found their key's job (River runs the insert middleware in the
// inserting goroutine).
type collapses struct {
	list []collapse
}

type collapsesKey struct{}

// debounceTx collapses, in tx, each debounced insert of results that
// found its key's job (gathered in c): it runs ferry_debounce on the job
// and returns the job as it is now. A job that ended meanwhile (its
// transaction committed between River's check and this one) is an
// error: the caller may insert again.
func (i *Inserter) debounceTx(ctx context.Context, tx pgx.Tx, c *collapses, results []*rivertype.JobInsertResult) error {
	for _, col := range c.list {
		var what string
		err := tx.QueryRow(ctx, `SELECT ferry_debounce($1, $2::jsonb, make_interval(secs => $3::float8 / 1000), make_interval(secs => $4::float8 / 1000))`,
			col.job, col.args, col.d.WindowMS, col.d.MaxWaitMS).Scan(&what)
		if err != nil {
			return fmt.Errorf("jobs: debounce %q: %w", col.d.Key, err)
		}
		if what == "ended" {
			return fmt.Errorf("jobs: debounce %q: job %d ended while this insert found it; insert again", col.d.Key, col.job)
		}
		job, err := i.client.JobGetTx(ctx, tx, col.job)
		if err != nil {
			return fmt.Errorf("jobs: debounce %q: %w", col.d.Key, err)
		}
		for _, r := range results {
			if r.Job != nil && r.Job.ID == col.job {
				r.Job = job
			}
		}
	}
	return nil
}
