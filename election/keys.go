package election

import (
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/migrations"
	"github.com/ferryq/ferry/workflow"
)

// The advisory key table: every Postgres advisory lock key ferry takes, with
// its owner, in the default deployment. Keys are per database: a deployment
// in a schema of its own (FERRY_SCHEMA) takes the election and liveness
// keys named after it (package internal/base/schema, migration 017). Single-key (bigint) locks show in
// pg_locks with objsubid 1; two-int locks with objsubid 2, so the two forms
// never collide. User code that wants named locks uses the two-int form with
// a namespace of its own (its first int), never these keys.
const (
	// KeyElection is the leader election singleton (FERRY_ELECTION_KEY).
	KeyElection int64 = 911000001
	// KeyReserved is held back for a future ferry singleton.
	KeyReserved int64 = 911000002
	// KeyMigrations serialises migration runs. Its owner defines it
	// (migrations.LockKey); this table only names it.
	KeyMigrations = migrations.LockKey
)

// KeyOwner is one row of the advisory key table.
type KeyOwner struct {
	Key   int64
	Form  string // "session bigint" or "session int4,int4"
	Owner string
	Use   string
}

// Keys is the advisory key table. A test fails if two owners share a key.
var Keys = []KeyOwner{
	{Key: KeyElection, Form: "session bigint", Owner: "election", Use: "this process is the leader: it runs the schedule and the Telegram long-polls"},
	{Key: KeyReserved, Form: "session bigint", Owner: "reserved", Use: "held back for a future ferry singleton; take no lock on it"},
	{Key: KeyMigrations, Form: "session bigint", Owner: "migrations", Use: "one migration run at a time (worker migrate, --migrate)"},
	{Key: jobs.RecountLockKey, Form: "transaction bigint", Owner: "jobs", Use: "one recount of the bounded queues at a time; setting a first bound takes it before it starts the queue's counters"},
	{Key: int64(liveness.Namespace), Form: "session int4,int4", Owner: "liveness", Use: "(911000003, ferry_worker.id): the worker process is alive while its liveness session holds it"},
	{Key: int64(liveness.FenceNamespace), Form: "transaction int4,int4", Owner: "liveness", Use: "(911000004, hashtext(client id)): a worker's UPDATEs of river_job hold it shared, a rescue of that worker exclusively, so neither passes the other"},
	{Key: workflow.LockNamespace, Form: "transaction int4,int4", Owner: "workflow", Use: "(911000006, hashtext(workflow id)): the trigger that ends a workflow's step holds it shared, a cancel, a retry or a run-time addition to the workflow exclusively"},
	{Key: workflow.SettleNamespace, Form: "transaction int4,int4", Owner: "workflow", Use: "(911000007, hashtext(workflow id)): at commit, a transaction that ended a workflow's step and may have ended the workflow takes it before it looks, so that of two that end the last two steps at once the second sees the first"},
}

// lockParts splits a bigint advisory key into pg_locks' classid (high 32
// bits) and objid (low 32 bits), as Postgres stores it.
func lockParts(key int64) (classid, objid int64) {
	u := uint64(key)
	return int64(u >> 32), int64(uint32(u))
}
