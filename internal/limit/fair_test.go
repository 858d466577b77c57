package limit

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// fairTenants is the fairness of these tests: the default queue shared by
// tenant, a:1, b:2, c:7.
func fairTenants() Limit {
	return Limit{Name: FairName("default"), Queue: "default", KeyField: "tenant",
		Fair: &Fairness{Weights: map[string]float64{"a": 1, "b": 2, "c": 7}, DefaultWeight: 1}}
}

// counts counts each tenant's starts among the first n.
func (h *harness) firstStarts(n int) map[string]int {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	out := map[string]int{}
	for _, tn := range h.rec.tenants[:min(n, len(h.rec.tenants))] {
		out[tn]++
	}
	return out
}

// Under saturation each key starts jobs in proportion to its weight,
// across two workers, whichever key's jobs were inserted first.
func TestFair_SharesByWeight(t *testing.T) {
	h := newHarness(t, 2, []Limit{fairTenants()}, true, 0)
	var args []testArgs
	for _, tn := range []string{"a", "b", "c"} { // a's first: River's order would run them first
		for range 300 {
			args = append(args, testArgs{SleepMS: 5, Tenant: tn})
		}
	}
	ids := h.insert(t, args...)
	rows := h.waitCompleted(t, ids, 2*time.Minute)
	for _, j := range rows {
		require.NotZero(t, gateOf(t, j), "job %d was parked behind its key's gate", j.ID)
	}
	// While all three have jobs waiting (c's 300 last 300/0.7 starts).
	got := h.firstStarts(400)
	t.Logf("first 400 starts: %v", got)
	assert.InDelta(t, 40, got["a"], 12, "a: weight 1 of 10")
	assert.InDelta(t, 80, got["b"], 16, "b: weight 2 of 10")
	assert.InDelta(t, 280, got["c"], 20, "c: weight 7 of 10")
}

// A key with a job waiting is served at the next claim, however many jobs
// another key has waiting ahead of it.
func TestFair_QuietKeyNotStarvedByAFlood(t *testing.T) {
	h := newHarness(t, 1, []Limit{fairTenants()}, true, 0)
	var flood []testArgs
	for range 3000 {
		flood = append(flood, testArgs{SleepMS: 5, Tenant: "flood"})
	}
	h.insert(t, flood...)
	require.Eventually(t, func() bool { return len(h.firstStarts(1<<30)) > 0 && h.startedCount() >= 100 }, time.Minute, 10*time.Millisecond)
	before := h.startedCount()
	quiet := h.insert(t, testArgs{SleepMS: 5, Tenant: "quiet"})
	h.waitCompleted(t, quiet, time.Minute)
	h.rec.mu.Lock()
	at := -1
	for i, tn := range h.rec.tenants {
		if tn == "quiet" {
			at = i
		}
	}
	h.rec.mu.Unlock()
	require.GreaterOrEqual(t, at, before)
	// Its fetch's claim, or the next: not behind the thousands waiting.
	assert.Less(t, at-before, 60, "the quiet key's job started %d starts after its insert", at-before)
	var waiting int
	require.NoError(t, h.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state = 'pending'`).Scan(&waiting))
	assert.Greater(t, waiting, 1000, "the flood was still waiting when the quiet key's job ran")
}

func (h *harness) startedCount() int {
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	return len(h.rec.tenants)
}

// A fair queue's keys under a concurrency limit per key: the limit holds,
// every job runs, and a key at its limit leaves the claim's room to the
// others.
func TestFair_WithAConcurrencyLimitPerKey(t *testing.T) {
	h := newHarness(t, 2, []Limit{fairTenants(), {Name: "per-tenant", Queue: "default", KeyField: "tenant", Concurrency: 2}}, true, 0)
	var args []testArgs
	for i := range 60 {
		args = append(args, testArgs{SleepMS: 30, Tenant: fmt.Sprintf("t%d", i%6)})
	}
	ids := h.insert(t, args...)
	h.waitCompleted(t, ids, time.Minute)
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for tn, m := range h.rec.max {
		assert.LessOrEqual(t, m, 2, "tenant %s", tn)
	}
	assert.Greater(t, h.rec.maxTotal, 2, "the keys ran side by side")
}

// ListFair shows a fair queue's keys: weight, running, waiting, started.
func TestListFair_ShowsKeys(t *testing.T) {
	h := newHarness(t, 1, []Limit{fairTenants()}, false, 0)
	ids := h.insert(t, testArgs{SleepMS: 10, Tenant: "c"}, testArgs{SleepMS: 10, Tenant: "c"}, testArgs{SleepMS: 10, Tenant: "zed"})
	h.waitCompleted(t, ids, time.Minute)
	var fs []FairStatus
	require.Eventually(t, func() bool {
		var err error
		fs, err = ListFair(context.Background(), h.pool)
		require.NoError(t, err)
		require.Len(t, fs, 1)
		var started int64
		for _, k := range fs[0].Keys {
			started += k.Started
		}
		return started == 3
	}, 20*time.Second, 100*time.Millisecond, "the worker adds its starts to the gates every %v", startedFlush)
	f := fs[0]
	assert.Equal(t, "default", f.Queue)
	assert.Equal(t, "tenant", f.KeyField)
	assert.Equal(t, 7.0, f.Weight("c"))
	byKey := map[string]FairKeyStatus{}
	for _, k := range f.Keys {
		byKey[k.Key] = k
	}
	assert.Equal(t, FairKeyStatus{Key: "c", Weight: 7, Started: 2}, byKey["c"])
	assert.Equal(t, FairKeyStatus{Key: "zed", Weight: 1, Started: 1}, byKey["zed"])
	ls, err := List(context.Background(), h.pool)
	require.NoError(t, err)
	assert.Empty(t, ls, "a fairness is not a limit")
}

func TestCheck_Fairness(t *testing.T) {
	ok := fairTenants()
	_, err := ok.Check()
	require.NoError(t, err)
	for field, l := range map[string]Limit{
		"kind, queue":       {Name: "fair:", KeyField: "t", Fair: &Fairness{}},
		"key":               {Name: "fair:q", Queue: "q", Fair: &Fairness{}},
		"concurrency, rate": {Name: "fair:q", Queue: "q", KeyField: "t", Concurrency: 1, Fair: &Fairness{}},
		"weights":           {Name: "fair:q", Queue: "q", KeyField: "t", Fair: &Fairness{Weights: map[string]float64{"x": 0}}},
		"default_weight":    {Name: "fair:q", Queue: "q", KeyField: "t", Fair: &Fairness{DefaultWeight: -1}},
	} {
		got, err := l.Check()
		assert.Error(t, err, field)
		assert.Equal(t, field, got)
	}
	_, err = Limit{Name: "fair:x", Kind: "k", Concurrency: 1}.Check()
	assert.ErrorContains(t, err, "names a queue's fairness")
}

// One claim of a fair queue takes as many jobs as the fetch asks for: the
// share a quiet key's one job left goes to the keys with more, and each
// key's share follows the weights across claims.
func TestFair_ClaimFillsTheFetch(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := context.Background()
	l, err := New(Config{Pool: pool, Limits: []Limit{fairTenants()}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	_, err = pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state)
		SELECT jsonb_build_object('tenant', t), 'limit.test', 25, 'default', 'available'::river_job_state
		FROM unnest(ARRAY['a', 'c']) t, generate_series(1, 100)
		UNION ALL SELECT '{"tenant": "quiet"}', 'limit.test', 25, 'default', 'available'::river_job_state`)
	require.NoError(t, err)
	// Weights a 1, c 7, quiet 1: shares of 16 are 2, 12 and 2; quiet has
	// one job, so a and c share the rest by stride.
	first := claimTenants(t, l, 16)
	assert.Equal(t, 1, first["quiet"])
	assert.Equal(t, 16, first["a"]+first["c"]+first["quiet"], "the fetch is filled: %v", first)
	// Across claims, a and c by 1:7.
	total := map[string]int{"a": first["a"], "c": first["c"]}
	for range 4 {
		for k, n := range claimTenants(t, l, 16) {
			total[k] += n
		}
	}
	assert.Equal(t, 79, total["a"]+total["c"])
	assert.InDelta(t, 79.0/8, total["a"], 2, "a: 1 of 8: %v", total)
}

// A gate that gave a claim fewer jobs than asked but still has one parked
// (one not due yet, or parked since the claim looked) stays active, and
// the worker keeps serving it: a job parked in it next is claimed at the
// next fetch, not when the worker next reads every gate.
func TestFair_AShortGateWithJobsParkedIsServedNext(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := context.Background()
	l, err := New(Config{Pool: pool, Limits: []Limit{fairTenants()}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	insert := func(tenant string, n int, due string) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
			SELECT jsonb_build_object('tenant', $1::text), 'limit.test', 25, 'default', 'available', now() + $3::interval
			FROM generate_series(1, $2)`, tenant, n, due)
		require.NoError(t, err)
	}
	insert("flood", 100, "0s")
	insert("quiet", 1, "1h") // parked, not due
	assert.Equal(t, map[string]int{"flood": 10}, claimTenants(t, l, 10), "the quiet gate had nothing due")
	insert("quiet", 1, "0s")
	assert.Equal(t, 1, claimTenants(t, l, 10)["quiet"], "the quiet key's due job at the next claim")
}

// Only a job parked under a concurrency limit is marked (ferry_slot): its
// end is what frees a slot, so only its end wakes the queue's workers.
func TestPark_MarksTheJobsThatHoldASlot(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := context.Background()
	l, err := New(Config{Pool: pool, Limits: []Limit{fairTenants(),
		{Name: "slots", Kind: "limit.slot", Concurrency: 1},
		{Name: "rate", Kind: "limit.rate", Rate: Rate{Count: 1, Period: time.Second, Burst: 1}}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))
	_, err = pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state)
		SELECT '{"tenant": "a"}', k, 25, 'default', 'available' FROM unnest(ARRAY['limit.test', 'limit.slot', 'limit.rate']) k`)
	require.NoError(t, err)
	rows, err := pool.Query(ctx, `SELECT kind, state::text, metadata ? 'ferry_gate', metadata ? 'ferry_slot' FROM river_job ORDER BY kind`)
	require.NoError(t, err)
	type park struct {
		kind, state  string
		gated, slots bool
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (park, error) {
		var p park
		return p, r.Scan(&p.kind, &p.state, &p.gated, &p.slots)
	})
	require.NoError(t, err)
	assert.Equal(t, []park{
		{"limit.rate", "pending", true, false},
		{"limit.slot", "pending", true, true},
		{"limit.test", "pending", true, false},
	}, got)
}

// claimTenants makes one claim of up to n jobs of the default queue with
// l, as a worker's fetch does, and counts the jobs claimed per tenant.
func claimTenants(t *testing.T, l *Limiter, n int) map[string]int {
	t.Helper()
	rows, err := l.Claim(context.Background(), riverpgxv5.New(l.pool).GetExecutor(), &riverdriver.JobGetAvailableParams{
		ClientID: "fair-test", MaxAttemptedBy: 100, MaxToLock: n, Queue: "default",
	})
	require.NoError(t, err)
	out := map[string]int{}
	for _, r := range rows {
		var a testArgs
		require.NoError(t, json.Unmarshal(r.EncodedArgs, &a))
		out[a.Tenant]++
	}
	return out
}
