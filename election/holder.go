package election

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Holder describes the session holding an election key, as seen from any
// connection to the same database.
type Holder struct {
	Key             int64      `json:"key"`
	BackendPID      int        `json:"backend_pid"`
	ApplicationName string     `json:"application_name"`
	ClientAddr      string     `json:"client_addr"`
	SessionState    string     `json:"session_state"`
	Term            *int64     `json:"term"`
	Hostname        string     `json:"hostname,omitempty"`
	PID             *int       `json:"pid"`
	AcquiredAt      *time.Time `json:"acquired_at"`
	StartedAt       *time.Time `json:"started_at"`
}

// Querier is what CurrentHolder runs on (a pool, a connection, a tx).
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const holderSQL = `SELECT l.pid, coalesce(a.application_name, ''),
       coalesce(host(a.client_addr) || ':' || a.client_port, 'local socket'), coalesce(a.state, ''),
       t.term, t.hostname, t.pid, t.acquired_at, t.started_at
FROM pg_locks l
LEFT JOIN pg_stat_activity a ON a.pid = l.pid
LEFT JOIN LATERAL (
    SELECT term, hostname, pid, acquired_at, started_at FROM ferry_leader_term
    WHERE key = $3 AND backend_pid = l.pid ORDER BY term DESC LIMIT 1
) t ON true
WHERE l.locktype = 'advisory' AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
  AND l.objsubid = 1 AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// CurrentHolder returns the session holding key in the current database, or
// nil when no one holds it.
func CurrentHolder(ctx context.Context, q Querier, key int64) (*Holder, error) {
	hi, lo := lockParts(key)
	h := &Holder{Key: key}
	var hostname *string
	err := q.QueryRow(ctx, holderSQL, hi, lo, key).Scan(&h.BackendPID, &h.ApplicationName, &h.ClientAddr, &h.SessionState,
		&h.Term, &hostname, &h.PID, &h.AcquiredAt, &h.StartedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("election: read the holder of key %d: %w", key, err)
	}
	if hostname != nil {
		h.Hostname = *hostname
	}
	if h.PID == nil {
		// The holder has the lock but has not recorded its term yet (or
		// could not): its application_name still names host and pid.
		if rest, ok := strings.CutPrefix(h.ApplicationName, "ferry-leader:"); ok {
			if i := strings.LastIndexByte(rest, ':'); i >= 0 {
				if pid, err := strconv.Atoi(rest[i+1:]); err == nil {
					h.PID, h.Hostname = &pid, rest[:i]
				}
			}
		}
	}
	return h, nil
}

// Term is one row of ferry_leader_term.
type Term struct {
	Term        int64      `json:"term"`
	Holder      string     `json:"holder"`
	Hostname    string     `json:"hostname"`
	PID         int        `json:"pid"`
	BackendPID  int        `json:"backend_pid"`
	AcquiredAt  time.Time  `json:"acquired_at"`
	StartedAt   *time.Time `json:"started_at"`
	ResignedAt  *time.Time `json:"resigned_at"`
	EndedReason *string    `json:"ended_reason"`
}

// Rows is what Terms runs on (a pool, a connection, a tx).
type Rows interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Terms returns the newest limit terms of key, newest first.
func Terms(ctx context.Context, q Rows, key int64, limit int) ([]Term, error) {
	rows, err := q.Query(ctx, `SELECT term, holder, hostname, pid, backend_pid, acquired_at, started_at, resigned_at, ended_reason
		FROM ferry_leader_term WHERE key = $1 ORDER BY term DESC LIMIT $2`, key, limit)
	if err != nil {
		return nil, fmt.Errorf("election: read terms of key %d: %w", key, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Term])
	if err != nil {
		return nil, fmt.Errorf("election: read terms of key %d: %w", key, err)
	}
	return out, nil
}
