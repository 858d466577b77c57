package main

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/pgtest"
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
		{"MarathonNone", checkMarathons(marathonObs{inserted: 3, length: time.Minute}), "0 marathon jobs found (3 inserted)"},
		{"MarathonQueryError", checkMarathons(marathonObs{inserted: 3, err: errQuery}), "query failed: connection refused"},
		{"FinalNoJob", checkFinal(finalObs{cutoff: at(10)}), "0 jobs inserted by 12:00:10: nothing to check"},
		{"FinalQueryError", checkFinal(finalObs{err: errQuery, groups: []finalGroup{{kind: "chaos.effect", state: "completed", n: 10}}}), "query failed: connection refused"},
		{"DeadNoWorker", checkDeaths(deathObs{exposures: map[int][]exposure{7: {{kind: exposedKill, at: at(1)}}}}), "0 workers recorded"},
		{"DeadQueryError", checkDeaths(deathObs{err: errQuery}), "query failed: connection refused"},
		{"DeadNoKill", checkDeaths(deathObs{rows: []workerRow{{pid: 7}}}), "no process was killed"},
		{"DeadKilledUnseen", checkDeaths(deathObs{rows: []workerRow{{pid: 7}}, exposures: map[int][]exposure{8: {{kind: exposedKill, at: at(1)}}}}), "killed pids [8] have no ferry_worker row"},
		{"StallNone", checkStall(stallObs{}), "no worker was stopped"},
		{"StallNothingLong", checkStall(stallObs{sparedObs: sparedObs{pid: 7, running: 3}, stopped: time.Second, lease: 3 * time.Second}), "no long job running"},
		{"StallOverLease", checkStall(stallObs{sparedObs: sparedObs{pid: 7, running: 3, long: 1, row: &workerRow{pid: 7}}, stopped: 4 * time.Second, lease: 3 * time.Second}), "not under its lease"},
		{"StallNoRow", checkStall(stallObs{sparedObs: sparedObs{pid: 7, running: 3, long: 1}, stopped: time.Second, lease: 3 * time.Second}), "no ferry_worker row"},
		{"StallQueryError", checkStall(stallObs{sparedObs: sparedObs{pid: 7, running: 3, long: 1, row: &workerRow{pid: 7}, err: errQuery}, stopped: time.Second, lease: 3 * time.Second}), "query failed: connection refused"},
		{"ExitsNone", checkExits(exitObs{}), "0 exits seen"},
		{"JobsQueryError", checkJobs(jobObs{committed: 10, effects: 10, err: errQuery}), "query failed: connection refused"},
		{"OutboxNoMessage", checkOutbox(outboxObs{}), "0 messages committed"},
		{"OutboxQueryError", checkOutbox(outboxObs{committed: 10, received: 10, err: errQuery}), "query failed: connection refused"},
		{"TicksNoTick", checkTicks(tickObs{from: at(0.5), to: at(10)}), "0 ticks observed of 10"},
		{"TicksEmptyWindow", checkTicks(tickObs{from: at(0.5), to: at(0.9)}), "an empty window"},
		{"TicksQueryError", checkTicks(tickObs{from: at(0), to: at(10), ticks: 11, err: errQuery}), "query failed: connection refused"},
		{"LimitedNoRun", checkLimited(limitedObs{committed: 9}), "9 limited jobs committed, 0 runs"},
		{"LimitedQueryError", checkLimited(limitedObs{committed: 9, runs: 9, err: errQuery}), "query failed: connection refused"},
		{"FairNoQuiet", checkFair(fairObs{flood: 1000}), "1000 flood and 0 quiet jobs committed, 0 quiet started"},
		{"FairNoBacklog", checkFair(fairObs{flood: 1000, quiet: 9, started: 9, checked: 4}), "the flood kept no backlog"},
		{"FairQueryError", checkFair(fairObs{flood: 1000, quiet: 9, err: errQuery}), "query failed: connection refused"},
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
	requireVerdict(t, checkJobs(jobObs{committed: 10, acknowledged: 10, effects: 11, doubled: 1}), verdictViolated, "1 with two or more")
}

func TestCheckFinal(t *testing.T) {
	t.Parallel()

	reason := "ferry: the worker died running this job 5 times"
	completed := finalGroup{kind: "chaos.effect", state: "completed", n: 90}
	requireVerdict(t, checkFinal(finalObs{groups: []finalGroup{completed, {kind: "ferry.noop", state: "discarded", reason: &reason, n: 1}}}),
		verdictOK, `91 jobs (90 chaos.effect, 1 ferry.noop), 90 completed; 1 ferry.noop discarded: "ferry: the worker died running this job 5 times", 0 not finalized`)
	requireVerdict(t, checkFinal(finalObs{groups: []finalGroup{completed, {kind: "chaos.effect", state: "running", n: 2}}}),
		verdictViolated, "not finalized: 2 chaos.effect running")
	requireVerdict(t, checkFinal(finalObs{groups: []finalGroup{completed, {kind: "chaos.effect", state: "cancelled", n: 1}}}),
		verdictViolated, "with no reason recorded: 1 chaos.effect cancelled")
}

func TestCheckDeaths(t *testing.T) {
	t.Parallel()

	tp := func(s float64) *time.Time { x := at(s); return &x }
	exposures := map[int][]exposure{
		1: {{kind: exposedKill, at: at(10)}},
		2: {{kind: exposedSIGSTOP, at: at(20)}, {kind: exposedSessions, at: at(40)}},
		3: {{kind: exposedSIGTERM, at: at(30)}},
	}
	rows := []workerRow{
		{pid: 1, deadAt: tp(11), rescued: 12},
		{pid: 2, deadAt: tp(42), rescued: 3},
		{pid: 3, stoppedAt: tp(31), deadAt: tp(32)},
		{pid: 4},
	}

	t.Run("EveryDeathAfterItsSessionEnded", func(t *testing.T) {
		t.Parallel()
		requireVerdict(t, checkDeaths(deathObs{rows: rows, exposures: exposures}), verdictOK,
			"2 declared dead while running (1 killed, 1 sessions terminated, 0 Postgres restart, 0 network partition, 0 SIGSTOP past the lease, 0 primary failover; 15 jobs rescued), 1 after a graceful stop")
	})

	t.Run("DeadDuringTheStall", func(t *testing.T) {
		t.Parallel()
		rows := slices.Clone(rows)
		rows[1].deadAt = tp(22)
		requireVerdict(t, checkDeaths(deathObs{rows: rows, exposures: exposures}), verdictViolated, "declared dead with no session of theirs ended: pid 2")
	})

	// A worker declared dead a second after the harness did kind to it:
	// a SIGSTOP past the lease ends its liveness session, the killing of
	// its liveness session alone does not.
	for _, tt := range []struct {
		name string
		kind exposureKind
		want verdict
		says string
	}{
		{"PausedPastTheLease", exposedPause, verdictOK, "3 declared dead while running (1 killed, 1 sessions terminated, 0 Postgres restart, 0 network partition, 1 SIGSTOP past the lease"},
		{"DeadAfterItsLivenessSessionAloneEnded", exposedLivenessKill, verdictViolated, "pid 4 () at 12:00:51.000 after liveness session terminated at 12:00:50.000"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			exposures := maps.Clone(exposures)
			exposures[4] = []exposure{{kind: tt.kind, at: at(50)}}
			rows := slices.Clone(rows)
			rows[3].deadAt = tp(51)
			requireVerdict(t, checkDeaths(deathObs{rows: rows, exposures: exposures}), tt.want, tt.says)
		})
	}

	t.Run("DeadLongAfterItsSessionEnded", func(t *testing.T) {
		t.Parallel()
		rows := slices.Clone(rows)
		rows[1].deadAt = tp(40 + deadWindow.Seconds() + 1)
		requireVerdict(t, checkDeaths(deathObs{rows: rows, exposures: exposures}), verdictViolated, "pid 2")
	})

	t.Run("LeftAlone", func(t *testing.T) {
		t.Parallel()
		rows := slices.Clone(rows)
		rows[3].deadAt = tp(50)
		requireVerdict(t, checkDeaths(deathObs{rows: rows, exposures: exposures}), verdictViolated, "pid 4 () at 12:00:50.000 after nothing the harness did")
	})

	t.Run("KilledNeverDeclaredDead", func(t *testing.T) {
		t.Parallel()
		rows := slices.Clone(rows)
		rows[0].deadAt = nil
		requireVerdict(t, checkDeaths(deathObs{rows: rows, exposures: exposures}), verdictViolated, "killed but never declared dead: pids [1]")
	})
}

func TestCheckStall(t *testing.T) {
	t.Parallel()

	tp := func(s float64) *time.Time { x := at(s); return &x }
	stall := stallObs{sparedObs: sparedObs{pid: 2, at: at(20), running: 14, long: 5, row: &workerRow{pid: 2}}, stopped: 1500 * time.Millisecond, lease: 3333 * time.Millisecond}
	requireVerdict(t, checkStall(stall), verdictOK, "pid 2 stopped 1.5s (lease 3.333s) running 14 jobs, 5 of them long: not declared dead, 0 jobs rescued from it")

	later := stall
	later.row, later.until = &workerRow{pid: 2, deadAt: tp(42)}, at(40)
	requireVerdict(t, checkStall(later), verdictOK, "not declared dead")

	dead := stall
	dead.row = &workerRow{pid: 2, deadAt: tp(22)}
	requireVerdict(t, checkStall(dead), verdictViolated, "declared dead true")

	rescued := stall
	rescued.rescued = 3
	requireVerdict(t, checkStall(rescued), verdictViolated, "3 jobs rescued from it")
}

func TestCheckExits(t *testing.T) {
	t.Parallel()

	kill, term := exposedKill, exposedSIGTERM
	exposures := map[int][]exposure{
		1: {{kind: exposedKill, at: at(10)}},
		2: {{kind: exposedSessions, at: at(40)}},
		3: {{kind: exposedSIGTERM, at: at(30)}},
		4: {{kind: exposedSIGSTOP, at: at(20)}},
	}
	exits := []workerExit{
		{pid: 1, code: 137, at: at(10), by: &kill},
		{pid: 2, code: 1, at: at(45), declaredDead: true},
		{pid: 3, code: 0, at: at(31), by: &term},
	}
	requireVerdict(t, checkExits(exitObs{exits: exits, exposures: exposures}), verdictOK,
		"3 exits: 1 killed, 1 stopped with SIGTERM (code 0), 1 stopped themselves declared dead after their sessions ended (restarted), 0 unexpected")

	stalled := append(slices.Clone(exits), workerExit{pid: 4, code: 1, at: at(23), declaredDead: true})
	requireVerdict(t, checkExits(exitObs{exits: stalled, exposures: exposures}), verdictViolated, "pid 4 exited on its own with code 1 (declared dead: true; before: SIGSTOP at 12:00:20.000; last error: \"\")")

	failedStop := append(slices.Clone(exits), workerExit{pid: 3, code: 1, at: at(31), by: &term})
	requireVerdict(t, checkExits(exitObs{exits: failedStop, exposures: exposures}), verdictViolated, "pid 3 exited after SIGTERM with code 1")
}

func TestAttributeDeaths(t *testing.T) {
	t.Parallel()

	tp := func(s float64) *time.Time { x := at(s); return &x }
	faults := []faultResult{{name: "a", at: at(10)}, {name: "b", at: at(20)}, {name: "c", at: at(30)}}
	attributeDeaths(faults, []workerRow{
		{pid: 1, deadAt: tp(11), rescued: 5},
		{pid: 2, deadAt: tp(31), rescued: 2},
		{pid: 3, deadAt: tp(35), rescued: 1},
		{pid: 4, stoppedAt: tp(21), deadAt: tp(22), rescued: 9}, // a graceful stop
	})
	require.Equal(t, [][2]int{{1, 5}, {0, 0}, {2, 3}}, [][2]int{{faults[0].dead, faults[0].rescued}, {faults[1].dead, faults[1].rescued}, {faults[2].dead, faults[2].rescued}})
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
	ok := report(&buf, []faultResult{{name: "kill -9 of the leader", gap: 1500 * time.Millisecond, dead: 1, rescued: 7}, {name: "SIGSTOP", note: "no failover"}},
		[]check{newCheck("a", verdictOK, "fine"), newCheck("b", verdictUnverified, "nothing to check")})
	require.False(t, ok)
	require.Contains(t, buf.String(), "kill -9 of the leader  1.5s          1 (7)")
	require.Contains(t, buf.String(), "SIGSTOP                no failover   0 (0)")
	require.NotContains(t, buf.String(), "stand-in")
	require.Contains(t, buf.String(), "chaos: 1 passed, 1 failed\n")

	require.False(t, report(&bytes.Buffer{}, nil, nil), "no check at all is no pass")
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
		rows, err := observeWorkers(ctx, pool)
		killed := map[int][]exposure{7: {{kind: exposedKill, at: now}}}
		return []check{
			checkHolders(sampleHolders(sctx, pool, election.KeyElection), nil),
			checkRuns(observeRuns(ctx, pool, nil, 1)),
			checkJobs(observeJobs(ctx, pool, 0)),
			checkFinal(observeFinal(ctx, pool, now)),
			checkOutbox(observeOutbox(ctx, pool, 0)),
			checkTicks(observeTicks(ctx, pool, now.Add(-5*time.Second), now)),
			checkDeaths(deathObs{rows: rows, exposures: killed, err: err}),
			checkStall(stallObs{sparedObs: observeSpared(ctx, pool, sparedObs{pid: 7, clientID: "x", running: 1, long: 1}, nil, rows, nil), stopped: time.Second, lease: 3 * time.Second}),
			checkOrdered(observeOrdered(ctx, pool, 0, nil, &inFlight{})),
		}
	}

	t.Run("Empty", func(t *testing.T) {
		checks := observeAll(pool)
		requireVerdict(t, checks[0], verdictUnverified, "no sample saw a holder")
		for _, c := range checks[1:6] {
			requireVerdict(t, c, verdictUnverified, "nothing to check")
		}
		requireVerdict(t, checks[6], verdictUnverified, "0 workers recorded in ferry_worker")
		requireVerdict(t, checks[7], verdictUnverified, "pid 7 has no ferry_worker row")
		requireVerdict(t, checks[8], verdictUnverified, "0 keyed messages received (0 committed in 0 rounds): nothing to check")
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

func TestCheckMarathons(t *testing.T) {
	t.Parallel()

	done := marathonJob{key: "marathon-1", state: "completed", attempt: 2, ranTo: true, rescues: 1}
	requireVerdict(t, checkMarathons(marathonObs{inserted: 1, length: time.Minute, jobs: []marathonJob{done}}),
		verdictOK, "1 of 1 jobs of 1m0s: marathon-1 completed in 2 attempts (1 rescued, 0 interrupted)")
	early := done
	early.ranTo = false
	requireVerdict(t, checkMarathons(marathonObs{inserted: 1, length: time.Minute, jobs: []marathonJob{early}}),
		verdictViolated, "BEFORE ITS TIME")
	running := marathonJob{key: "marathon-2", state: "running", attempt: 1}
	requireVerdict(t, checkMarathons(marathonObs{inserted: 2, length: time.Minute, jobs: []marathonJob{done, running}}),
		verdictViolated, "marathon-2 running in 1 attempts")
	requireVerdict(t, checkMarathons(marathonObs{inserted: 2, length: time.Minute, jobs: []marathonJob{done}}),
		verdictViolated, "1 of 2 jobs")
}

func TestCheckLost(t *testing.T) {
	t.Parallel()

	dead := workerExit{pid: 2, code: 1, at: at(30), declaredDead: true}
	cut := lostObs{how: "cut off", pid: 2, clientID: "w2", at: at(20), lasted: partitionFor, running: 9, long: 7, dead: true, rescued: 10, completed: 10, exit: &dead}
	requireVerdict(t, checkLost(namePartition, cut), verdictOK, "pid 2 cut off for 7.333s running 9 jobs, 7 of them long: declared dead, 10 jobs rescued from it and completed; exited with code 1 (declared dead: true)")

	alive := cut
	alive.dead, alive.rescued = false, 0
	requireVerdict(t, checkLost(namePartition, alive), verdictViolated, "declared dead false, 0 jobs rescued from it")

	unrescued := cut
	unrescued.rescued = 0
	requireVerdict(t, checkLost(namePartition, unrescued), verdictViolated, "declared dead true, 0 jobs rescued")

	unfinished := cut
	unfinished.completed = 8
	requireVerdict(t, checkLost(namePartition, unfinished), verdictViolated, "only 8 of them completed")

	stillUp := cut
	stillUp.exit = nil
	requireVerdict(t, checkLost(namePause, stillUp), verdictViolated, "but still running")
	term := exposedSIGTERM
	stopped := cut
	stopped.exit = &workerExit{pid: 2, code: 0, at: at(90), by: &term}
	requireVerdict(t, checkLost(namePause, stopped), verdictViolated, "but exited with code 0 (declared dead: false)")

	requireVerdict(t, checkLost(namePartition, lostObs{how: "cut off"}), verdictUnverified, "no worker was cut off")
	requireVerdict(t, checkLost(namePause, lostObs{how: "stopped"}), verdictUnverified, "no worker was stopped")
	idle := cut
	idle.long = 0
	requireVerdict(t, checkLost(namePartition, idle), verdictUnverified, "no long job running")
	failed := cut
	failed.err = errors.New("connection refused")
	requireVerdict(t, checkLost(namePartition, failed), verdictUnverified, "query failed: connection refused")
}

func TestCheckKills(t *testing.T) {
	t.Parallel()

	tp := func(s float64) *time.Time { x := at(s); return &x }
	kills := killsObs{sparedObs: sparedObs{pid: 3, clientID: "w3", at: at(20), running: 8, long: 4, row: &workerRow{pid: 3}}, kills: 30}
	requireVerdict(t, checkKills(kills), verdictOK, "pid 3's liveness session ended 30 times, running 8 jobs, 4 of them long: not declared dead, 0 jobs rescued from it, still up")

	dead := kills
	dead.row = &workerRow{pid: 3, deadAt: tp(22)}
	requireVerdict(t, checkKills(dead), verdictViolated, "declared dead true")
	later := kills
	later.row, later.until = &workerRow{pid: 3, deadAt: tp(42)}, at(40)
	requireVerdict(t, checkKills(later), verdictOK, "not declared dead")
	rescued := kills
	rescued.rescued = 2
	requireVerdict(t, checkKills(rescued), verdictViolated, "2 jobs rescued from it")
	exited := kills
	exited.exit = &workerExit{pid: 3, code: 1, at: at(25), why: "liveness: lost"}
	requireVerdict(t, checkKills(exited), verdictViolated, "exited with code 1 at 12:00:25.000")

	requireVerdict(t, checkKills(killsObs{}), verdictUnverified, "nothing to check")
	none := kills
	none.kills = 0
	requireVerdict(t, checkKills(none), verdictUnverified, "no liveness session of pid 3 was found")
	idle := kills
	idle.long = 0
	requireVerdict(t, checkKills(idle), verdictUnverified, "no long job running")
	norow := kills
	norow.row = nil
	requireVerdict(t, checkKills(norow), verdictUnverified, "pid 3 has no ferry_worker row")
	failed := kills
	failed.err = errQuery
	requireVerdict(t, checkKills(failed), verdictUnverified, "query failed: connection refused")
}

func TestCheckLostReply(t *testing.T) {
	t.Parallel()

	tp := func(s float64) *time.Time { x := at(s); return &x }
	ok := lostReplyObs{pid: 5, at: at(20), retried: true, register: true, row: &workerRow{pid: 5, clientID: "w5"}, started: 12}
	requireVerdict(t, checkLostReply(ok), verdictOK, "pid 5's registration failed with its reply lost, then registered; declared dead false, 12 jobs started, still up")

	idle := ok
	idle.started = 0
	requireVerdict(t, checkLostReply(idle), verdictViolated, "0 jobs started")
	dead := ok
	dead.row = &workerRow{pid: 5, deadAt: tp(21)}
	requireVerdict(t, checkLostReply(dead), verdictViolated, "declared dead true")
	exited := ok
	exited.exit = &workerExit{pid: 5, code: 1, at: at(22), why: "liveness: cannot register"}
	requireVerdict(t, checkLostReply(exited), verdictViolated, "exited with code 1")
	unregistered := ok
	unregistered.register = false
	requireVerdict(t, checkLostReply(unregistered), verdictViolated, "pid 5 never registered")

	requireVerdict(t, checkLostReply(lostReplyObs{}), verdictUnverified, "nothing to check")
	missed := ok
	missed.retried = false
	requireVerdict(t, checkLostReply(missed), verdictUnverified, "the lost reply was not its registration's")
	norow := ok
	norow.row = nil
	requireVerdict(t, checkLostReply(norow), verdictUnverified, "no ferry_worker row")
	failed := ok
	failed.err = errQuery
	requireVerdict(t, checkLostReply(failed), verdictUnverified, "query failed: connection refused")
}

func TestCheckOrdered(t *testing.T) {
	t.Parallel()

	ok := orderedObs{rounds: 50, arrivals: 102, maxInFlight: 1, committed: 100, received: 100}
	requireVerdict(t, checkOrdered(ok), verdictOK, "100 keyed messages committed in 50 rounds (0 keys given up after a failed write), 100 received once each, 0 lost; at most 1 of a key in flight (apart: 0 redeliveries of a message already received, 0 beside its delivery in flight); 0 first arrived before")

	two := ok
	two.maxInFlight, two.over = 2, "key-1-0: messages 7, 8"
	requireVerdict(t, checkOrdered(two), verdictViolated, "at most 2 of a key in flight (apart: 0 redeliveries of a message already received, 0 beside its delivery in flight); 0 first arrived before a message its writer committed earlier (shown, not judged) (key key-1-0: messages 7, 8)")
	lost := ok
	lost.received, lost.lost = 99, 1
	requireVerdict(t, checkOrdered(lost), verdictViolated, "1 lost")
	reordered := ok
	reordered.outOfOrder = 1
	requireVerdict(t, checkOrdered(reordered), verdictOK, "1 first arrived before a message its writer committed earlier (shown, not judged)")

	requireVerdict(t, checkOrdered(orderedObs{rounds: 3, committed: 6}), verdictUnverified, "0 keyed messages received (6 committed in 3 rounds)")
	failed := ok
	failed.err = errQuery
	requireVerdict(t, checkOrdered(failed), verdictUnverified, "query failed: connection refused")
}

func TestInFlight(t *testing.T) {
	t.Parallel()

	var f inFlight
	leaveA := f.enter("a", "1")
	leaveB := f.enter("b", "2")
	f.record("1")
	leaveA()
	f.enter("a", "3")()
	require.Equal(t, 1, f.max, "one message of each key at a time")
	// Two deliveries of one message at once are one message in flight.
	leaveB2 := f.enter("b", "2")
	require.Equal(t, 1, f.max)
	require.EqualValues(t, 1, f.beside)
	// A message recorded, delivered again beside its key's next one: a
	// redelivery, counted apart.
	leaveA3 := f.enter("a", "4")
	f.enter("a", "1")()
	require.Equal(t, 1, f.max)
	require.EqualValues(t, 1, f.redelivered)
	leaveA3()
	// Two messages of a key at once.
	leaveB3 := f.enter("b", "5")
	require.Equal(t, 2, f.max)
	require.Equal(t, "b: messages 2, 5", f.over)
	leaveB()
	leaveB2()
	leaveB3()
	f.enter("b", "6")()
	require.EqualValues(t, 8, f.total)
}

func TestCheckDemotion(t *testing.T) {
	t.Parallel()

	tp := func(s float64) *time.Time { x := at(s); return &x }
	ok := demotionObs{pid: 3, at: at(20), stopped: tp(21.2), logged: true, reason: "ownership check timed out after 333ms", next: tp(24)}
	requireVerdict(t, checkDemotion(ok), verdictOK, "pid 3 stopped leading 1.2s after it was cut off (tick 1s, timeout 333ms; demoted: ownership check timed out after 333ms), the next leader began at 4s")

	late := ok
	late.stopped = tp(24.5)
	requireVerdict(t, checkDemotion(late), verdictViolated, "pid 3 stopped leading 4.5s after")
	other := ok
	other.reason = "stamp term start: timeout"
	requireVerdict(t, checkDemotion(other), verdictViolated, "demoted: stamp term start")
	silent := ok
	silent.logged = false
	requireVerdict(t, checkDemotion(silent), verdictViolated, "logged no demotion")

	unended := ok
	unended.stopped = nil
	requireVerdict(t, checkDemotion(unended), verdictUnverified, "no recorded end")
	alone := ok
	alone.next = nil
	requireVerdict(t, checkDemotion(alone), verdictUnverified, "no leader run began")
	requireVerdict(t, checkDemotion(demotionObs{}), verdictUnverified, "no leader was cut off")
	requireVerdict(t, checkDemotion(demotionObs{pid: 3, at: at(20), err: errors.New("no rows")}), verdictUnverified, "no rows")
}

func TestCheckLimited(t *testing.T) {
	t.Parallel()
	requireVerdict(t, checkLimited(limitedObs{committed: 9, jobs: 9, completed: 9, runs: 10, most: 1}), verdictOK,
		"9 limited jobs on 3 tenants, all completed in 10 runs; a start saw at most 1 others of its tenant running (concurrency 2)")
	requireVerdict(t, checkLimited(limitedObs{committed: 9, jobs: 9, completed: 9, runs: 10, most: 2, over: []string{"job 4 of tenant-0 beside 2 others"}}),
		verdictViolated, "starts beyond the concurrency of 2: [job 4 of tenant-0 beside 2 others]")
	requireVerdict(t, checkLimited(limitedObs{committed: 9, jobs: 9, completed: 8, runs: 8, most: 1}), verdictViolated,
		"9 limited jobs committed, 9 in river_job, 8 completed: some never ran")
}

func TestCheckFair(t *testing.T) {
	t.Parallel()

	ok := fairObs{flood: 2000, quiet: 9, floodJobs: 2000, floodDone: 2000, quietJobs: 9, quietDone: 9, started: 9, checked: 9,
		leastPassed: 0.5, quietWait: 300 * time.Millisecond, floodWait: 12 * time.Second}
	tests := []struct {
		name   string
		change func(o *fairObs)
		want   verdict
		hint   string
	}{
		{"AllRan", func(*fairObs) {}, verdictOK,
			"9 quiet jobs of 3 sources all completed beside a flood of 2000 (2000 completed, none lost), each before the flood jobs waiting at its insert (9 checked: at least 50% of them passed); longest wait to a first start: quiet 300ms, flood 12s"},
		{"FloodWaiting", func(o *fairObs) { o.floodDone = 1500 }, verdictOK, "beside a flood of 2000 (1500 completed, none lost)"},
		{"Starved", func(o *fairObs) {
			o.starved = []string{"job 7 of quiet-1 waited 12.0s, behind all 1000 flood jobs waiting at its insert"}
		}, verdictViolated, "quiet jobs starved by the flood: [job 7 of quiet-1"},
		{"QuietUnrun", func(o *fairObs) { o.quietDone = 8 }, verdictViolated, "9 quiet jobs committed, 9 in river_job, 8 completed: some never ran"},
		{"FloodLost", func(o *fairObs) { o.floodLost = 1 }, verdictViolated,
			"2000 flood jobs committed, 2000 in river_job, 1 discarded or cancelled: some lost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := ok
			tt.change(&o)
			requireVerdict(t, checkFair(o), tt.want, tt.hint)
		})
	}
}

func TestCheckTerms(t *testing.T) {
	t.Parallel()

	runs := []leaderRun{{pid: 1, term: 1, start: at(1)}, {pid: 2, term: 2, start: at(5)}, {pid: 3, term: 40, start: at(9)}}
	requireVerdict(t, checkTerms(runObs{runs: runs}), verdictOK, "3 runs, terms 1 to 40, each above the last")
	back := append(slices.Clone(runs), leaderRun{pid: 4, term: 3, start: at(12)})
	requireVerdict(t, checkTerms(runObs{runs: back}), verdictViolated, "term 3 (pid 4) after term 40 (pid 3)")
	requireVerdict(t, checkTerms(runObs{runs: runs[:1]}), verdictUnverified, "1 leader runs")
	requireVerdict(t, checkTerms(runObs{err: errors.New("gone")}), verdictUnverified, "query failed: gone")
}
