package limit

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/uniquestates"
	"github.com/riverqueue/river/rivertype"
)

// jobColumns are the columns of river_job that River's driver reads into
// a rivertype.JobRow (riverpgxv5's JobGetByIDMany), in its order: a claim
// returns them, so that its jobs need no second read. TestClaim_RowsAsRiverReadsThem
// fails when River's driver reads a row differently.
const jobColumns = `id, args, attempt, attempted_at, attempted_by, created_at, errors, finalized_at, kind,
    max_attempts, metadata, priority, queue, state, scheduled_at, tags, unique_key, unique_states`

// scanJobRow reads jobColumns (and then extra) from row as River's
// driver does.
func scanJobRow(row pgx.Row, extra ...any) (*rivertype.JobRow, error) {
	var (
		j                              rivertype.JobRow
		attempt, maxAttempts, priority int16
		attemptedAt, finalizedAt       *time.Time
		errs                           [][]byte
		state                          string
		uniqueStates                   pgtype.Bits
	)
	dest := append([]any{&j.ID, &j.EncodedArgs, &attempt, &attemptedAt, &j.AttemptedBy, &j.CreatedAt, &errs,
		&finalizedAt, &j.Kind, &maxAttempts, &j.Metadata, &priority, &j.Queue, &state, &j.ScheduledAt,
		&j.Tags, &j.UniqueKey, &uniqueStates}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	j.Attempt, j.MaxAttempts, j.Priority = max(int(attempt), 0), max(int(maxAttempts), 0), max(int(priority), 0)
	if attemptedAt != nil {
		t := attemptedAt.UTC()
		j.AttemptedAt = &t
	}
	if finalizedAt != nil {
		t := finalizedAt.UTC()
		j.FinalizedAt = &t
	}
	j.CreatedAt, j.ScheduledAt = j.CreatedAt.UTC(), j.ScheduledAt.UTC()
	j.State = rivertype.JobState(state)
	j.Errors = make([]rivertype.AttemptError, len(errs))
	for i, raw := range errs {
		if err := riverdriver.UnmarshalAttemptError(raw, &j.Errors[i]); err != nil {
			return nil, fmt.Errorf("job %d: errors: %w", j.ID, err)
		}
	}
	var bitmask byte
	if uniqueStates.Valid && len(uniqueStates.Bytes) > 0 {
		bitmask = uniqueStates.Bytes[0]
	}
	j.UniqueStates = uniquestates.UniqueBitmaskToStates(bitmask)
	return &j, nil
}
