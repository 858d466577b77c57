package seal

import (
	"cmp"
	"context"
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// DefaultReplayWindow is how long after it was due a sealed job may still
// start (FERRY_SEAL_REPLAY_WINDOW).
const DefaultReplayWindow = 168 * time.Hour

// Reason says why a worker refused a job. The names are contract: they are
// in the log line `seal: job refused`, the refusal error and the metric.
type Reason string

// The reasons a job is refused.
const (
	// ReasonMissing: the job has no seal (planted, or inserted by a
	// process without keys).
	ReasonMissing Reason = "missing"
	// ReasonInvalid: the seal is malformed, made with a key this worker
	// does not have, or does not match the job's kind, args or run id.
	ReasonInvalid Reason = "invalid"
	// ReasonQueue: the seal is good, for another queue: the job was moved.
	ReasonQueue Reason = "queue"
	// ReasonReplayed: the seal's run id was claimed by another job: a copy
	// of a sealed job written back under another id.
	ReasonReplayed Reason = "replayed"
	// ReasonStale: the job is due more than the replay window ago and has
	// never started.
	ReasonStale Reason = "stale"
)

// Reasons are every Reason, in a stable order.
var Reasons = []Reason{ReasonMissing, ReasonInvalid, ReasonQueue, ReasonReplayed, ReasonStale}

// RefusedError is the error a refused job is discarded with. Its message
// starts with "ferry: seal:" and names the reason; it never holds a key.
type RefusedError struct {
	Reason Reason
	JobID  int64
	Kind   string
	// Detail says what was found, for the operator.
	Detail string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("ferry: seal: job refused (%s): %s", e.Reason, e.Detail)
}

// DB is what the run-id claim runs on: a *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Keys verify; a job sealed with any of them passes. Required.
	Keys *Keys
	// DB holds ferry_seal_run, where run ids are claimed. Required.
	DB DB
	// ReplayWindow: a job due longer ago than this that never started is
	// refused as stale. Default DefaultReplayWindow.
	ReplayWindow time.Duration
	Logger       *slog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Verifier is the River worker middleware that refuses any job ferry did
// not seal, before the kind's worker sees it. See the package doc.
type Verifier struct {
	river.MiddlewareDefaults
	cfg     VerifierConfig
	refused [5]atomic.Int64 // by reasonIndex
	claims  *claimer
	// lastMissing is the unix nanoseconds of the last refusal for
	// ReasonMissing.
	lastMissing atomic.Int64
}

var reasonIndex = map[Reason]int{ReasonMissing: 0, ReasonInvalid: 1, ReasonQueue: 2, ReasonReplayed: 3, ReasonStale: 4}

var _ rivertype.WorkerMiddleware = (*Verifier)(nil)

// NewVerifier returns a Verifier; install it in river.Config.Middleware of
// the client that works jobs.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	if cfg.Keys.Len() == 0 {
		return nil, errors.New("ferry: seal: a verifier needs keys")
	}
	if cfg.DB == nil {
		return nil, errors.New("ferry: seal: a verifier needs a database")
	}
	if cfg.ReplayWindow <= 0 {
		cfg.ReplayWindow = DefaultReplayWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Verifier{cfg: cfg, claims: &claimer{db: cfg.DB}}, nil
}

// Refused is how many jobs this Verifier refused for reason since it was
// made.
func (v *Verifier) Refused(reason Reason) int64 {
	i, ok := reasonIndex[reason]
	if !ok {
		return 0
	}
	return v.refused[i].Load()
}

// LastMissing is when this Verifier last refused a job for ReasonMissing
// (zero if never): the sign of an inserter without keys, or of planted
// jobs.
func (v *Verifier) LastMissing() time.Time {
	n := v.lastMissing.Load()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// Work verifies job and runs doInner only if its seal holds. A refused job is
// logged (`seal: job refused`), and returned a *RefusedError with the job's
// max_attempts lowered to its attempt, so that River discards it at once
// (state discarded, the error as its last error, no retry): it is a dead
// letter, and its worker never ran.
func (v *Verifier) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	refusal, err := v.Check(ctx, job)
	if err != nil {
		return err // the claim could not be made: River retries the job, unrun
	}
	if refusal != nil {
		v.refused[reasonIndex[refusal.Reason]].Add(1)
		if refusal.Reason == ReasonMissing {
			v.lastMissing.Store(v.cfg.Now().UnixNano())
		}
		v.cfg.Logger.WarnContext(ctx, "seal: job refused",
			"job_id", job.ID, "kind", job.Kind, "queue", job.Queue, "reason", string(refusal.Reason), "detail", refusal.Detail)
		job.MaxAttempts = job.Attempt
		return refusal
	}
	return doInner(ctx)
}

// Check verifies job's seal and, when it holds, claims its run id for job
// and, for a job sealed encrypted, replaces job.EncodedArgs with the
// decrypted args. It returns the refusal (nil when the job may run), or an
// error when the claim could not be made.
func (v *Verifier) Check(ctx context.Context, job *rivertype.JobRow) (*RefusedError, error) {
	refuse := func(r Reason, format string, args ...any) (*RefusedError, error) {
		return &RefusedError{Reason: r, JobID: job.ID, Kind: job.Kind, Detail: fmt.Sprintf(format, args...)}, nil
	}
	var meta struct {
		Seal json.RawMessage `json:"ferry_seal"`
	}
	if len(job.Metadata) > 0 {
		if err := json.Unmarshal(job.Metadata, &meta); err != nil {
			return refuse(ReasonMissing, "the job's metadata is not a JSON object")
		}
	}
	if len(meta.Seal) == 0 || string(meta.Seal) == "null" {
		return refuse(ReasonMissing, "the job has no seal; it was not inserted by ferry with seal keys")
	}
	var st stamp
	if err := json.Unmarshal(meta.Seal, &st); err != nil || st.V != version || st.R == "" || st.M == "" {
		return refuse(ReasonInvalid, "the seal is malformed")
	}
	k, ok := v.cfg.Keys.byID(st.K)
	if !ok {
		return refuse(ReasonInvalid, "the seal was made with key %q, which this worker does not have", st.K)
	}
	got, err := base64.RawURLEncoding.DecodeString(st.M)
	if err != nil {
		return refuse(ReasonInvalid, "the seal is malformed")
	}
	canon, err := canonical(job.EncodedArgs)
	if err != nil {
		return refuse(ReasonInvalid, "the args are not JSON the seal can cover")
	}
	if !hmac.Equal(got, st.mac(k.mac, job.Kind, canon)) {
		return refuse(ReasonInvalid, "the seal does not match the job's kind, args or run id: altered")
	}
	if st.Q != job.Queue {
		return refuse(ReasonQueue, "sealed for queue %q, found in queue %q", st.Q, job.Queue)
	}
	plain := job.EncodedArgs
	if st.E {
		if plain, err = st.decrypt(k.enc, job.Kind, job.EncodedArgs); err != nil {
			return refuse(ReasonInvalid, "%v", err)
		}
	}
	// open gives the kind's worker the args as they were sealed.
	open := func() (*RefusedError, error) { job.EncodedArgs = plain; return nil, nil }
	due := time.Unix(st.D, 0)
	if v.cfg.Now().After(due.Add(v.cfg.ReplayWindow)) {
		// A job that started within the window and is retried after it
		// holds its claim; any other is stale.
		var owner int64
		err := v.cfg.DB.QueryRow(ctx, `SELECT job_id FROM ferry_seal_run WHERE run_id = $1`, st.R).Scan(&owner)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return refuse(ReasonStale, "due %s, more than the replay window %s ago", due.UTC().Format(time.RFC3339), v.cfg.ReplayWindow)
		case err != nil:
			return nil, fmt.Errorf("ferry: seal: look up run id: %w", err)
		case owner != job.ID:
			return refuse(ReasonReplayed, "its run id was claimed by job %d", owner)
		}
		return open()
	}
	// The claim commits before the worker runs: once any job has started
	// with this run id, no other job id can take it.
	owner, err := v.claims.claim(ctx, st.R, job.ID)
	if err != nil {
		return nil, fmt.Errorf("ferry: seal: claim run id: %w", err)
	}
	if owner != job.ID {
		return refuse(ReasonReplayed, "its run id was claimed by job %d", owner)
	}
	return open()
}

// DeleteExpiredClaims deletes run-id claims made longer than window ago. A
// copy of their job is refused as stale without them (it was due before
// its claim, so more than window ago); the one thing lost is a retry of the
// job itself that long after it started, which is refused as stale too.
func DeleteExpiredClaims(ctx context.Context, db DB, window time.Duration) (int64, error) {
	tag, err := db.Exec(ctx, `DELETE FROM ferry_seal_run WHERE claimed_at < now() - make_interval(secs => $1)`, window.Seconds())
	if err != nil {
		return 0, fmt.Errorf("ferry: seal: delete expired claims: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Cleaner returns a leader runnable that deletes expired claims
// (DeleteExpiredClaims) every hour until ctx is done.
func Cleaner(db DB, window time.Duration, logger *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		for {
			n, err := DeleteExpiredClaims(ctx, db, window)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if n > 0 {
				logger.InfoContext(ctx, "seal: expired run id claims deleted", "count", n)
			}
			t := time.NewTimer(time.Hour)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
	}
}

// claimer claims run ids in batches: the claims of jobs starting at the
// same time share one statement and one commit (group commit), since a
// commit per job would cap a worker near the disk's flush rate. The first
// caller with no batch in flight runs one with every claim pending, then
// hands the turn to the first claim that arrived meanwhile; no goroutine of
// its own outlives a claim.
type claimer struct {
	db       DB
	mu       sync.Mutex
	pending  []*claimReq
	flushing bool
}

type claimReq struct {
	run   string
	job   int64
	owner int64
	err   error
	done  chan struct{} // closed with owner or err set
	turn  chan struct{} // closed when this claim is to run the next batch
}

// claimTimeout bounds one batch's statement.
const claimTimeout = 30 * time.Second

// claim claims run for job and returns the job id holding it: job, or the
// job that claimed it first.
func (c *claimer) claim(ctx context.Context, run string, job int64) (int64, error) {
	r := &claimReq{run: run, job: job, done: make(chan struct{}), turn: make(chan struct{})}
	c.mu.Lock()
	c.pending = append(c.pending, r)
	lead := !c.flushing
	c.flushing = true
	c.mu.Unlock()
	if !lead {
		// A waiter does not give up on ctx: the batch it is in may be
		// next, and whoever runs it returns within claimTimeout.
		select {
		case <-r.done:
			return r.owner, r.err
		case <-r.turn:
		}
	}
	c.mu.Lock()
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()
	c.run(context.WithoutCancel(ctx), batch)
	c.mu.Lock()
	if len(c.pending) > 0 {
		close(c.pending[0].turn)
	} else {
		c.flushing = false
	}
	c.mu.Unlock()
	return r.owner, r.err
}

// run claims batch in one statement, run ids in order so that batches of
// several workers lock rows alike. Two claims of one run id in a batch
// (a job and its copy starting together) are one row: the first holds it.
func (c *claimer) run(ctx context.Context, batch []*claimReq) {
	ctx, cancel := context.WithTimeout(ctx, claimTimeout)
	defer cancel()
	first := make(map[string]int64, len(batch))
	for _, r := range batch {
		if _, ok := first[r.run]; !ok {
			first[r.run] = r.job
		}
	}
	runs := slices.Sorted(maps.Keys(first))
	ids := make([]int64, len(runs))
	for i, run := range runs {
		ids[i] = first[run]
	}
	owners := make(map[string]int64, len(runs))
	err := func() error {
		rows, err := c.db.Query(ctx, `
			INSERT INTO ferry_seal_run (run_id, job_id)
			SELECT * FROM unnest($1::text[], $2::bigint[])
			ON CONFLICT (run_id) DO UPDATE SET run_id = excluded.run_id
			RETURNING run_id, job_id`, runs, ids)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var run string
			var owner int64
			if err := rows.Scan(&run, &owner); err != nil {
				return err
			}
			owners[run] = owner
		}
		return rows.Err()
	}()
	for _, r := range batch {
		if owner, ok := owners[r.run]; ok && err == nil {
			r.owner = owner
		} else {
			r.err = cmp.Or(err, errors.New("no row returned"))
		}
		close(r.done)
	}
}
