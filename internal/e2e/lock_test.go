package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
	"github.com/ferryq/ferry/locks"
)

// lockHolder starts `enqueue lock run name --ttl ttl -- sh -c script` and
// waits for the script's "started" line.
func lockHolder(t *testing.T, url, name, ttl, script string) *proctest.Proc {
	t.Helper()
	p := proctest.Start(t, bins(t).enqueue, env(url), "lock", "run", name, "--ttl", ttl, "--", "sh", "-c", script)
	_, err := p.WaitForLine(startTimeout, "started")
	require.NoError(t, err)
	return p
}

func lockRows(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM ferry_lock`).Scan(&n))
	return n
}

// enqueue lock run: the token reaches CMD, CMD's exit code is the CLI's,
// bad input runs nothing and writes nothing.
func TestLockRun(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	requireBadInput(t, url, `lock name "bad name"`, "lock", "run", "bad name", "--", "true")
	requireBadInput(t, url, "lock run takes NAME -- CMD", "lock", "run", "report")
	requireBadInput(t, url, "--ttl 10ms: must be at least 1s", "lock", "run", "report", "--ttl", "10ms", "--", "true")
	requireBadInput(t, url, "--ttl 11m0s: must be at least 1s and at most 10m0s", "lock", "run", "report", "--ttl", "11m", "--", "true")
	requireBadInput(t, url, "--wait -1s", "lock", "run", "report", "--wait", "-1s", "--", "true")
	requireBadInput(t, url, `command "no-such-command-here"`, "lock", "run", "report", "--", "no-such-command-here")
	require.Zero(t, lockRows(t, pool), "bad input writes nothing")

	for i, code := range []int{0, 7} {
		stdout, stderr, got := enqueue(t, url, nil, "lock", "run", "report", "--",
			"sh", "-c", fmt.Sprintf(`echo "$FERRY_LOCK_NAME $FERRY_LOCK_TOKEN"; exit %d`, code))
		require.Equal(t, code, got, "CMD's exit code; stderr: %s", stderr)
		require.Empty(t, stderr, "nothing said when CMD fails on its own")
		require.Equal(t, fmt.Sprintf("report %d\n", i+1), stdout, "one more token per acquisition")
	}
	// Released: nothing listed.
	var list struct{ Locks []locks.Holder }
	enqueueOK(t, url, &list, "lock", "list")
	require.Empty(t, list.Locks)

	// A signal that ends CMD: 128 + the signal, as a shell says.
	_, _, got := enqueue(t, url, nil, "lock", "run", "report", "--", "sh", "-c", "kill -KILL $$")
	require.Equal(t, 128+int(syscall.SIGKILL), got)
}

// A held lock: a second `lock run` exits 75 naming the holder; `lock list`
// shows it; a waiter gets it when the holder's CMD ends, and when the
// holder is killed -9 (its CMD gets SIGTERM, the lock expires).
func TestLockRun_Held(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	holder := lockHolder(t, url, "deploy:db", "2s", `trap 'echo got-term; exit 143' TERM; echo started; while :; do sleep 0.05; done`)
	stdout, stderr, code := enqueue(t, url, nil, "lock", "run", "deploy:db", "--", "sh", "-c", "echo ran")
	require.Equal(t, 75, code, stderr)
	require.Empty(t, stdout, "CMD never ran")
	line := oneLine(t, stderr)
	require.Contains(t, line, "lock deploy:db is held by ")
	require.Contains(t, line, fmt.Sprintf(":%d (token 1,", holder.Pid()), "names the holder: host:pid")

	var list struct{ Locks []locks.Holder }
	enqueueOK(t, url, &list, "lock", "list")
	require.Len(t, list.Locks, 1)
	require.Equal(t, "deploy:db", list.Locks[0].Name)
	require.EqualValues(t, 1, list.Locks[0].Token)
	require.True(t, strings.HasSuffix(list.Locks[0].Holder, fmt.Sprintf(":%d", holder.Pid())))
	table, stderr, code := enqueue(t, url, nil, "lock", "list")
	require.Zero(t, code, stderr)
	require.Contains(t, table, "EXPIRES IN")
	require.Contains(t, tableRow(t, table, "deploy:db"), "1")

	// kill -9 of the CLI alone: its CMD is told (SIGTERM), and the lock,
	// no longer renewed, expires; a waiter then takes it.
	waiter := proctest.Start(t, bins(t).enqueue, env(url), "lock", "run", "deploy:db", "--wait", "1m", "--",
		"sh", "-c", `echo "token $FERRY_LOCK_TOKEN"`)
	require.NoError(t, syscall.Kill(holder.Pid(), syscall.SIGKILL))
	_, err := holder.WaitForLine(startTimeout, "got-term")
	require.NoError(t, err, "the dead CLI's CMD got SIGTERM")
	code, err = waiter.Wait(time.Minute)
	require.NoError(t, err)
	require.Zero(t, code, waiter.Stderr())
	require.Equal(t, "token 2\n", waiter.Stdout())
	require.Equal(t, 1, lockRows(t, pool))
}

// A free lock whose row another transaction holds for the whole --wait (a
// fenced write of a holder whose lease ran out): exit 75, CMD never runs.
func TestLockRun_RowLocked(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
		VALUES ('report', 1, 'slow', clock_timestamp() - interval '1 minute', clock_timestamp() - interval '1 second')`)
	require.NoError(t, err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	require.ErrorIs(t, locks.Fence(ctx, tx, "report", 1), locks.ErrLost, "expired; the row stays locked")

	stdout, stderr, code := enqueue(t, url, nil, "lock", "run", "report", "--wait", "500ms", "--", "sh", "-c", "echo ran")
	require.Equal(t, 75, code, stderr)
	require.Empty(t, stdout, "CMD never ran")
	require.Contains(t, oneLine(t, stderr), "before any attempt saw a live holder")
}

// A lock lost while CMD runs, found taken by another holder: CMD gets
// SIGTERM and SIGKILL at once, the CLI exits 75 saying so.
func TestLockRun_Lost(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	holder := lockHolder(t, url, "report", "1s", `trap 'echo got-term; exit 0' TERM; echo started; while :; do sleep 0.05; done`)
	// Another holder took the lock (as after an expiry the CLI missed):
	// the CLI's next renewal finds its token gone.
	_, err := pool.Exec(context.Background(), `UPDATE ferry_lock SET token = token + 1, holder = 'thief' WHERE name = 'report'`)
	require.NoError(t, err)
	code, err := holder.Wait(time.Minute)
	require.NoError(t, err)
	require.Equal(t, 75, code)
	require.Contains(t, oneLine(t, holder.Stderr()), "lock report (token 1) lost while sh ran: it was sent SIGTERM and SIGKILL at once")

	// --json: a failure is one JSON object.
	_, stderr, code := enqueue(t, url, nil, "lock", "list", "--json", "extra")
	require.Equal(t, 2, code)
	var jerr struct {
		Error    string `json:"error"`
		ExitCode int    `json:"exit_code"`
	}
	require.NoError(t, json.Unmarshal([]byte(stderr), &jerr))
	require.Equal(t, 2, jerr.ExitCode)
}

// A holder paused past its local deadline (a SIGSTOP of the CLI, as a GC
// pause or a stopped VM would do) notices the loss when it runs again, short
// of the database's expiry: its CMD, which ignores SIGTERM, must be gone
// before the database can give the lock to the waiter. The waiter's CMD
// reads the first CMD's state in /proc as it starts: the order of the two
// events, not a duration, is what is checked.
func TestLockRun_LostStopsCMDBeforeNextHolder(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	pidFile := filepath.Join(t.TempDir(), "first.pid")
	const ttl = 8 * time.Second

	first := lockHolder(t, url, "report", ttl.String(),
		fmt.Sprintf(`echo $$ > %s; trap 'echo got-term' TERM; echo started; while :; do sleep 0.05; done`, pidFile))
	raw, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	cmdPid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	require.NoError(t, err)
	require.NotContains(t, []string{"", "Z"}, procState(cmdPid), "the first CMD runs")

	waiter := proctest.Start(t, bins(t).enqueue, env(url), "lock", "run", "report", "--wait", "1m", "--",
		"sh", "-c", fmt.Sprintf(`s=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' /proc/%d/status 2>/dev/null); echo "token $FERRY_LOCK_TOKEN first=${s:-gone}"`, cmdPid))

	// Stop the CLI, then read the expiry its last renewal set (a renewal
	// sent just before the stop may still land: read until it is settled).
	require.NoError(t, syscall.Kill(first.Pid(), syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(first.Pid(), syscall.SIGCONT) })
	var expires time.Time
	var left time.Duration
	for {
		var at time.Time
		var us int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT expires_at, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
			FROM ferry_lock WHERE name = 'report'`).Scan(&at, &us))
		if at.Equal(expires) {
			left = time.Duration(us) * time.Microsecond
			break
		}
		expires = at
		time.Sleep(200 * time.Millisecond)
	}
	// Resume it inside the last fifth of the ttl: past its local deadline
	// (a fifth before the expiry), before the database's expiry.
	require.Greater(t, left, ttl/10, "the CLI was stopped before its lock expired")
	time.Sleep(left - ttl/10)
	require.NoError(t, syscall.Kill(first.Pid(), syscall.SIGCONT))

	code, err := first.Wait(time.Minute)
	require.NoError(t, err)
	require.Equal(t, 75, code, first.Stderr())
	require.Contains(t, oneLine(t, first.Stderr()), "lock report (token 1) lost while sh ran")
	require.Contains(t, first.Stdout(), "got-term", "SIGTERM first")

	code, err = waiter.Wait(time.Minute)
	require.NoError(t, err)
	require.Zero(t, code, waiter.Stderr())
	require.Regexp(t, `^token 2 first=(gone|Z)\n$`, waiter.Stdout(),
		"the first CMD was gone (or a zombie) when the next holder's CMD started")
}

// procState is the state letter of process pid in /proc ("" when gone).
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "State:"); ok {
			return strings.TrimSpace(v)[:1]
		}
	}
	return ""
}
