package seal

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"
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

// DB is what the cleaner of claims runs on: a *pgxpool.Pool.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// VerifierConfig configures a Verifier.
type VerifierConfig struct {
	// Keys verify; a job sealed with any of them passes. Required.
	Keys *Keys
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
	if cfg.ReplayWindow <= 0 {
		cfg.ReplayWindow = DefaultReplayWindow
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Verifier{cfg: cfg}, nil
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
	if refusal := v.Check(job); refusal != nil {
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

// Check verifies job's seal, and its claim as the database marked it in the
// row, and, for a job sealed encrypted, replaces job.EncodedArgs with the
// decrypted args. It returns the refusal, nil when the job may run. It
// reads nothing but job: no query, no write.
func (v *Verifier) Check(job *rivertype.JobRow) *RefusedError {
	refuse := func(r Reason, format string, args ...any) *RefusedError {
		return &RefusedError{Reason: r, JobID: job.ID, Kind: job.Kind, Detail: fmt.Sprintf(format, args...)}
	}
	// The two keys of metadata the check reads (the seal of a job sealed
	// before seals were tags, and the claim mark), in one pass without
	// decoding the rest (River stores metadata as jsonb: a valid document,
	// no key twice).
	var meta [2]gjson.Result
	gjson.ParseBytes(job.Metadata).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case MetadataKey:
			meta[0] = v
		case claimKey:
			meta[1] = v
		}
		return true
	})
	if t, ok := Tag(job.Tags); ok {
		// The seal is a tag (migration 021); metadata.ferry_seal is read
		// only for jobs sealed before, which have none.
		meta[0] = gjson.Result{Type: gjson.String, Str: t}
	}
	if meta[0].Type == gjson.Null {
		return refuse(ReasonMissing, "the job has no seal; it was not inserted by ferry with seal keys")
	}
	st, err := parseStamp(meta[0])
	if err != nil {
		return refuse(ReasonInvalid, "the seal is malformed")
	}
	got, err := base64.RawURLEncoding.DecodeString(st.M)
	if err != nil {
		return refuse(ReasonInvalid, "the seal is malformed")
	}
	canon, err := canonical(job.EncodedArgs)
	if err != nil {
		return refuse(ReasonInvalid, "the args are not JSON the seal can cover")
	}
	// The keys the seal names (a version-3 seal names 16 bits of the key
	// id: two keys of a worker may share them), the one whose MAC matches.
	var (
		k            key
		named, found bool
		sum          [sha256.Size]byte
	)
	for _, c := range v.cfg.Keys.keys {
		if !st.madeBy(c) {
			continue
		}
		named = true
		if hmac.Equal(got, st.mac(sum[:0], c, job.Kind, canon)) {
			k, found = c, true
			break
		}
	}
	if !named {
		return refuse(ReasonInvalid, "the seal was made with key %q, which this worker does not have", st.K)
	}
	if !found {
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
	due := time.Unix(st.D, 0)
	if meta[1].Type != gjson.Null {
		// Written by the database when the job was (the claim, migration
		// 014): its run id was another job's, or a deleted job's, or it
		// was written back long after it was due.
		var c claimMark
		if err := json.Unmarshal([]byte(meta[1].Raw), &c); err != nil {
			return refuse(ReasonInvalid, "the claim mark ferry_seal_claim is malformed")
		}
		switch {
		case c.Gone:
			return refuse(ReasonReplayed, "its run id belonged to job %d, since deleted: a copy written back", c.Job)
		case c.Job != job.ID:
			return refuse(ReasonReplayed, "its run id was claimed by job %d", c.Job)
		case time.Unix(c.At, 0).After(due.Add(v.cfg.ReplayWindow)):
			return refuse(ReasonStale, "due %s, written at %s, more than the replay window %s later",
				due.UTC().Format(time.RFC3339), time.Unix(c.At, 0).UTC().Format(time.RFC3339), v.cfg.ReplayWindow)
		}
	}
	if job.Attempt <= 1 && v.cfg.Now().After(due.Add(v.cfg.ReplayWindow)) {
		// A job that started within the window and is retried after it
		// runs; a first start this late does not.
		return refuse(ReasonStale, "due %s, more than the replay window %s ago, and never started", due.UTC().Format(time.RFC3339), v.cfg.ReplayWindow)
	}
	job.EncodedArgs = plain
	return nil
}

// claimKey is the key of the mark below in a job's metadata.
const claimKey = "ferry_seal_claim"

// claimMark is metadata.ferry_seal_claim, which the database writes into a
// sealed job's row when its run id's claim was not its own, or late
// (migration 014).
type claimMark struct {
	Job  int64 `json:"job"`
	At   int64 `json:"at"`
	Gone bool  `json:"gone"`
}

// claimGrace is how long after a job was due its claim may be made without
// a mark (migration 014 writes the mark when the claim is later than
// that), and how much longer than the replay window a claim is kept.
const claimGrace = time.Hour

// claimBatchPages is how many pages of ferry_seal_run one statement of
// DeleteExpiredClaims reads: 1 MB of 8 kB pages, about 13,000 claims.
const claimBatchPages = 128

// DeleteExpiredClaims deletes the run-id claims of jobs due longer ago than
// window (and claimGrace), in batches, each its own short statement over
// the next claimBatchPages pages of the table (a TID range scan): a pass
// reads each page once, and no batch reads again the rows the batches
// before it deleted, which stay on their pages until a vacuum. A copy of
// such a job written back later claims its run id anew, more than window
// after the job was due: the database marks it, and workers refuse it as
// stale. The job itself, still in river_job and retried, is not affected:
// its row was marked (or not) when it was written.
func DeleteExpiredClaims(ctx context.Context, db DB, window time.Duration) (int64, error) {
	return DeleteExpiredClaimsEach(ctx, db, window, nil)
}

// DeleteExpiredClaimsEach is DeleteExpiredClaims calling batch, if not
// nil, after each statement with the claims it deleted.
func DeleteExpiredClaimsEach(ctx context.Context, db DB, window time.Duration, batch func(deleted int64)) (int64, error) {
	// The pages there now: claims written during the pass, at the end of
	// the table, are not expired.
	var pages int64
	if err := db.QueryRow(ctx, `SELECT pg_relation_size('ferry_seal_run') / current_setting('block_size')::bigint`).Scan(&pages); err != nil {
		return 0, fmt.Errorf("ferry: seal: delete expired claims: %w", err)
	}
	var total int64
	for from := int64(0); from < pages; from += claimBatchPages {
		tag, err := db.Exec(ctx, `
			DELETE FROM ferry_seal_run
			WHERE ctid >= ($1::text)::tid AND ctid < ($2::text)::tid
			  AND coalesce(due, claimed_at) < now() - make_interval(secs => $3)`,
			fmt.Sprintf("(%d,0)", from), fmt.Sprintf("(%d,0)", from+claimBatchPages), (window + claimGrace).Seconds())
		if err != nil {
			return total, fmt.Errorf("ferry: seal: delete expired claims: %w", err)
		}
		total += tag.RowsAffected()
		if batch != nil {
			batch(tag.RowsAffected())
		}
	}
	return total, nil
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
