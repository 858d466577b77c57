package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/testkit/pgtest"
)

var (
	errQuery = errors.New("connection refused")
	t0       = time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func requireVerdict(t *testing.T, c check, want verdict, resultContains string) {
	t.Helper()
	require.Equal(t, want, c.verdict, "%s: %s", c.name, c.result)
	require.Contains(t, c.result, resultContains)
	require.Equal(t, want == verdictOK, c.ok())
}

// TestOracle_FailsClosed: for every check, an observation that is empty or
// that a query error cut short fails the check; it never passes.
func TestOracle_FailsClosed(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		check      check
		resultHint string
	}{
		{"HoldersNoSample", checkHolders(holderObs{}, nil), "0 samples taken"},
		{"HoldersNoHolderSeen", checkHolders(holderObs{samples: 40}, nil), "no sample saw a holder"},
		{"HoldersQueryError", checkHolders(holderObs{samples: 40, withHolder: 40, max: 1,
			failures: []sampleFailure{{at: at(30), err: errQuery}}}, []outage{{from: at(1), to: at(3)}}), "connection refused"},
		{"RunsNoRun", checkRuns(runObs{}), "0 overlaps in 0 runs: nothing to check"},
		{"RunsQueryError", checkRuns(runObs{err: errQuery, want: 2}), "query failed: connection refused"},
		{"JobsNoJob", checkJobs(jobObs{}), "0 jobs committed"},
		{"JobsQueryError", checkJobs(jobObs{committed: 10, effects: 10, err: errQuery}), "query failed: connection refused"},
		{"OutboxNoMessage", checkOutbox(outboxObs{}), "0 messages committed"},
		{"OutboxQueryError", checkOutbox(outboxObs{committed: 10, received: 10, err: errQuery}), "query failed: connection refused"},
		{"TicksNoTick", checkTicks(tickObs{from: at(0.5), to: at(10)}), "0 ticks observed of 10"},
		{"TicksEmptyWindow", checkTicks(tickObs{from: at(0.5), to: at(0.9)}), "an empty window"},
		{"TicksQueryError", checkTicks(tickObs{from: at(0), to: at(10), ticks: 11, err: errQuery}), "query failed: connection refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			requireVerdict(t, tt.check, verdictUnverified, tt.resultHint)
			require.Equal(t, "UNVERIFIED (fails)", tt.check.verdict.String())
		})
	}
}

func TestCheckHolders(t *testing.T) {
	t.Parallel()

	during := []outage{{from: at(10), to: at(13)}}

	t.Run("OneHolder", func(t *testing.T) {
		t.Parallel()
		o := holderObs{samples: 100, withHolder: 95, max: 1, failures: []sampleFailure{{at: at(11), err: errQuery}}}
		requireVerdict(t, checkHolders(o, during), verdictOK, "max 1 in 100 samples (95 with a holder; 1 failed during the faults' outages)")
	})

	t.Run("TwoHolders", func(t *testing.T) {
		t.Parallel()
		requireVerdict(t, checkHolders(holderObs{samples: 100, withHolder: 100, max: 2}, during), verdictViolated, "max 2")
	})

	t.Run("FailureAfterOutage", func(t *testing.T) {
		t.Parallel()
		o := holderObs{samples: 100, withHolder: 100, max: 1, failures: []sampleFailure{{at: at(13.5), err: errQuery}}}
		requireVerdict(t, checkHolders(o, during), verdictUnverified, "1 samples failed outside the faults' outages")
	})
}

func TestCheckRuns(t *testing.T) {
	t.Parallel()

	stop := func(s float64) *time.Time { x := at(s); return &x }

	t.Run("Consecutive", func(t *testing.T) {
		t.Parallel()
		o := runObs{want: 3, killedAt: map[int]time.Time{2: at(20)}, runs: []leaderRun{
			{pid: 1, start: at(0), stopped: stop(10)},
			{pid: 2, start: at(11)}, // killed at 20
			{pid: 3, start: at(22)}, // the last run: nothing follows it
		}}
		requireVerdict(t, checkRuns(o), verdictOK, "0 overlaps in 3 runs")
	})

	t.Run("OverlapWithAnEarlierRunThanThePrevious", func(t *testing.T) {
		t.Parallel()
		o := runObs{want: 3, runs: []leaderRun{
			{pid: 1, start: at(0), stopped: stop(30)},
			{pid: 2, start: at(10), stopped: stop(12)},
			{pid: 3, start: at(20), stopped: stop(25)},
		}}
		requireVerdict(t, checkRuns(o), verdictViolated, "2 overlaps in 3 runs")
	})

	t.Run("NoEndThenAnotherRun", func(t *testing.T) {
		t.Parallel()
		o := runObs{want: 2, runs: []leaderRun{{pid: 1, start: at(0)}, {pid: 2, start: at(10), stopped: stop(20)}}}
		requireVerdict(t, checkRuns(o), verdictUnverified, "an overlap cannot be ruled out")
	})

	t.Run("FewerRunsThanSeen", func(t *testing.T) {
		t.Parallel()
		o := runObs{want: 6, runs: []leaderRun{{pid: 1, start: at(0), stopped: stop(10)}}}
		requireVerdict(t, checkRuns(o), verdictUnverified, "1 runs recorded, but the suite saw 6 start")
	})
}

func TestCheckJobs(t *testing.T) {
	t.Parallel()

	requireVerdict(t, checkJobs(jobObs{committed: 10, acknowledged: 9, effects: 10}), verdictOK, "10 jobs committed (9 acknowledged")
	requireVerdict(t, checkJobs(jobObs{committed: 10, acknowledged: 10, effects: 9, missing: 1}), verdictViolated, "1 missing")
	requireVerdict(t, checkJobs(jobObs{committed: 9, acknowledged: 10, effects: 9}), verdictViolated, "9 jobs committed (10 acknowledged")
}

func TestCheckOutbox(t *testing.T) {
	t.Parallel()

	requireVerdict(t, checkOutbox(outboxObs{committed: 10, acknowledged: 10, received: 10, redeliveries: 2}), verdictOK, "2 wire redeliveries absorbed")
	requireVerdict(t, checkOutbox(outboxObs{committed: 10, acknowledged: 10, received: 9, lost: 1}), verdictViolated, "1 lost")
}

func TestCheckTicks(t *testing.T) {
	t.Parallel()

	requireVerdict(t, checkTicks(tickObs{from: at(0.5), to: at(10.2), ticks: 10, skipped: 2}), verdictOK, "10 ticks of 10")
	// Ticks that stopped half-way: the window, not the ticks seen, says
	// how many are owed.
	requireVerdict(t, checkTicks(tickObs{from: at(0.5), to: at(10.2), ticks: 5}), verdictViolated, "5 missing")
	require.EqualValues(t, 11, ticksIn(at(0), at(10)))
	require.EqualValues(t, 1, ticksIn(at(1), at(1)))
	require.Zero(t, ticksIn(at(1.1), at(1.9)))
}

func TestReport(t *testing.T) {
	t.Parallel()

	var buf bytes.Buffer
	ok := report(&buf, []faultResult{{name: "kill -9 of the leader", gap: 1500 * time.Millisecond}}, standIns{rescued: 3},
		[]check{newCheck("a", verdictOK, "fine"), newCheck("b", verdictUnverified, "nothing to check")})
	require.False(t, ok)
	require.Contains(t, buf.String(), "for the rescuer (until ferry's liveness rescue lands)  3 running jobs of killed workers put back with an UPDATE")
	require.Contains(t, buf.String(), "chaos: 1 passed, 1 failed\n")

	require.False(t, report(&bytes.Buffer{}, nil, standIns{}, nil), "no check at all is no pass")
}

// TestObserve_ScratchDatabase runs the oracle's queries against a migrated
// database of its own: with its tables empty every check fails as
// unverified, and with the pool closed (every query fails) too.
func TestObserve_ScratchDatabase(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	_, err := pool.Exec(ctx, oracleSchema)
	require.NoError(t, err)

	observeAll := func(pool *pgxpool.Pool) []check {
		sctx, cancel := context.WithTimeout(ctx, 350*time.Millisecond)
		defer cancel()
		now := time.Now()
		return []check{
			checkHolders(sampleHolders(sctx, pool, election.KeyElection), nil),
			checkRuns(observeRuns(ctx, pool, nil, 1)),
			checkJobs(observeJobs(ctx, pool, 0)),
			checkOutbox(observeOutbox(ctx, pool, 0)),
			checkTicks(observeTicks(ctx, pool, now.Add(-5*time.Second), now)),
		}
	}

	t.Run("Empty", func(t *testing.T) {
		checks := observeAll(pool)
		requireVerdict(t, checks[0], verdictUnverified, "no sample saw a holder")
		for _, c := range checks[1:] {
			requireVerdict(t, c, verdictUnverified, "nothing to check")
		}
	})

	t.Run("QueryError", func(t *testing.T) {
		closed, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		closed.Close()
		checks := observeAll(closed)
		requireVerdict(t, checks[0], verdictUnverified, "failed outside the faults' outages")
		for _, c := range checks[1:] {
			requireVerdict(t, c, verdictUnverified, "query failed: ")
		}
	})
}
