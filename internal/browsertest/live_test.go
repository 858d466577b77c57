package browsertest_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// The leader page of one worker shows the new leader when leadership moves
// to another worker, without a reload: the new leader announces itself by
// broadcast, the first worker's console streams it to the page
// (server-sent events), and the page fetches its content again. Then the
// locks page shows a lock taken meanwhile, announced by the leader's watch.
func TestAdminConsole_LiveLeader(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	worker := proctest.Build(t, "./cmd/worker")["./cmd/worker"]
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	env := []string{"DATABASE_URL=" + url, "FERRY_LOG_FORMAT=json", "FERRY_BROADCAST_KEYS=" + secretKey(t)}
	args := []string{"run", "--leader-tick", "1s", "--standby-probe", "1s", "--shutdown-grace", "2s"}

	w1 := proctest.Start(t, worker, env, append(args, "--admin-addr", "127.0.0.1:0")...)
	line, err := w1.WaitForLineFunc(startTimeout, logtest.Logged("admin: listening"))
	require.NoError(t, err)
	var listening struct{ Addr string }
	require.NoError(t, json.Unmarshal([]byte(line), &listening))
	base := "http://" + listening.Addr
	_, err = w1.WaitForLineFunc(startTimeout, logtest.Logged("election: leader acquired"))
	require.NoError(t, err)
	w2 := proctest.Start(t, worker, env, append(args, "--admin-addr", "off")...)
	_, err = w2.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)

	b := newBrowser(t, chrome)
	b.do("open the leader page", chromedp.Navigate(base+"/admin/leader"), chromedp.WaitVisible(chromedp.CSS("#holder")))
	require.Contains(t, b.text("#holder"), fmt.Sprintf("pid %d", w1.Pid()))
	_, err = chromedp.Run(b.step(), chromedp.Evaluate[bool](`window.notReloaded = true`))
	require.NoError(t, err)
	// The page's event stream made w1 open its LISTEN session.
	waitFor(t, "w1's broadcast session", func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND application_name LIKE 'ferry-broadcast:%:' || $1::text`, fmt.Sprint(w1.Pid())).Scan(&n)
		return err == nil && n == 1
	})

	// Leadership moves: w1's lock session is killed, w1 demotes itself at
	// its next tick and tries the lock again at once, while w2 tries it
	// every 250 ms. The kill comes just after one of w1's ticks (its lock
	// session's query_start moves), so w2 tries about 750 ms before w1
	// finds the lock lost. (Killing at a fixed cadence can lock onto w1's
	// ticks: a 5 s wait is five of w1's 1 s ticks, each kill then landed
	// just before w1's tick, and w1 won every time.) A few rounds cover a
	// machine too slow for one.
	leaderSession := func() (pid int, tick time.Time, err error) {
		err = pool.QueryRow(ctx, `SELECT pid, query_start FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'ferry-leader:%:' || $1::text`, fmt.Sprint(w1.Pid())).Scan(&pid, &tick)
		return pid, tick, err
	}
	moved := false
	for range 5 {
		_, before, err := leaderSession()
		require.NoError(t, err, "w1's lock session")
		var backend int
		waitFor(t, "a tick of w1", func() bool {
			var tick time.Time
			backend, tick, err = leaderSession()
			return err == nil && tick.After(before)
		})
		var killed bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, backend).Scan(&killed))
		require.True(t, killed, "w1's lock session %d was killed", backend)
		if _, err := w2.WaitForLineFunc(5*time.Second, logtest.Logged("election: failover acquired")); err == nil {
			moved = true
			break
		}
		t.Log("w2 did not take the lock after w1's lock session was killed; again")
		waitFor(t, "w1 leading again", func() bool { _, _, err := leaderSession(); return err == nil })
	}
	require.True(t, moved, "w2 never took the lock from w1")

	want := fmt.Sprintf("pid %d", w2.Pid())
	_, err = chromedp.Run(b.step(), chromedp.Poll[bool](
		`document.getElementById("holder") !== null && document.getElementById("holder").innerText.includes(`+fmt.Sprintf("%q", want)+`)`,
		chromedp.WithPollingInterval(pollEvery)))
	if err != nil {
		t.Fatalf("the page does not show the new leader (%v); it shows: %s", err, b.text("#holder"))
	}
	stayed, err := chromedp.Run(b.step(), chromedp.Evaluate[bool](`window.notReloaded === true && Number(document.body.dataset.live) > 0`))
	require.NoError(t, err)
	require.True(t, stayed, "the page changed in place: no reload, the live script swapped its content")
	require.False(t, strings.Contains(b.text("#holder"), fmt.Sprintf("pid %d", w1.Pid())))

	// A named lock taken anywhere (here with plain SQL) appears on the
	// locks page: the leader sees the change and announces it.
	b.do("open the locks page", chromedp.Navigate(base+"/admin/locks"), chromedp.WaitVisible(chromedp.CSS("main h1")))
	_, err = chromedp.Run(b.step(), chromedp.Evaluate[bool](`window.notReloaded = true`))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
		VALUES ('nightly-report', 1, 'browsertest', now(), now() + interval '1 hour')`)
	require.NoError(t, err)
	_, err = chromedp.Run(b.step(), chromedp.Poll[bool](`document.querySelector('tr[data-lock="nightly-report"]') !== null`,
		chromedp.WithPollingInterval(pollEvery)))
	require.NoError(t, err, "the locks page shows the new lock")
	stayed, err = chromedp.Run(b.step(), chromedp.Evaluate[bool](`window.notReloaded === true`))
	require.NoError(t, err)
	require.True(t, stayed, "no reload")
}

// secretKey is a broadcast key: 32 random bytes, base64.
func secretKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(k)
}
