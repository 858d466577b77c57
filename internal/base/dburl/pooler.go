package dburl

import (
	"fmt"

	"github.com/jackc/pgx/v5"
)

// EnvPooler names the pooler between ferry and Postgres: none (the
// default), session (a session-mode pooler: every session is a client's
// for its life, as with no pooler) or transaction (PgBouncer's
// pool_mode = transaction: consecutive transactions of one client may run
// on different server sessions).
const EnvPooler = "FERRY_POOLER"

// Pooler modes.
const (
	PoolerNone        = "none"
	PoolerSession     = "session"
	PoolerTransaction = "transaction"
)

// ParsePooler checks a FERRY_POOLER value ("" is none).
func ParsePooler(v string) (string, error) {
	switch v {
	case "", PoolerNone:
		return PoolerNone, nil
	case PoolerSession, PoolerTransaction:
		return v, nil
	}
	return "", fmt.Errorf("%s: want none, session or transaction, got %q", EnvPooler, v)
}

// ApplyPooler fits cfg to the pooler: through a transaction pooler, pgx
// may not keep named prepared statements (its default statement cache),
// since the next transaction may run on a server session that never saw
// them (PgBouncer before 1.21 does not track them). It caches statement
// descriptions instead and runs every query as the unnamed statement: one
// round trip still, and nothing left behind on the server session.
func ApplyPooler(cfg *pgx.ConnConfig, pooler string) {
	if pooler == PoolerTransaction {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
}
