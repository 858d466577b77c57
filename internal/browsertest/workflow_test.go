package browsertest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// TestAdminConsole_WorkflowDAG: a worker's console lists a workflow and
// draws its DAG; when a step ends, the page shows it without a reload
// (the leader's watch announces the workflows' change, the page's event
// stream fetches its content again); each step links to River UI's page
// of its job.
func TestAdminConsole_WorkflowDAG(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	bins := proctest.Build(t, "./cmd/worker", "./cmd/enqueue")
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	env := []string{"DATABASE_URL=" + url, "FERRY_LOG_FORMAT=json", "FERRY_BROADCAST_KEYS=" + secretKey(t)}
	w := proctest.Start(t, bins["./cmd/worker"], env, "run", "--leader-tick", "1s", "--admin-addr", "127.0.0.1:0", "--shutdown-grace", "2s", "--job-timeout", "2h")
	line, err := w.WaitForLineFunc(startTimeout, logtest.Logged("admin: listening"))
	require.NoError(t, err)
	var listening struct{ Addr string }
	require.NoError(t, json.Unmarshal([]byte(line), &listening))
	base := "http://" + listening.Addr
	_, err = w.WaitForLineFunc(startTimeout, logtest.Logged("election: runnables started"))
	require.NoError(t, err)

	// "slow" sleeps until the test cancels it; "after" waits for it.
	file := filepath.Join(t.TempDir(), "wf.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`id: dag
name: dag
steps:
  - {name: quick, kind: ferry.noop}
  - {name: slow, kind: ferry.noop, args: {sleep: 1h}}
  - {name: after, kind: ferry.noop, depends_on: [quick, slow]}
`), 0o600))
	add := proctest.Start(t, bins["./cmd/enqueue"], env, "workflow", "add", "--file", file)
	code, err := add.Wait(startTimeout)
	require.NoError(t, err)
	require.Zero(t, code)
	waitFor(t, "slow running", func() bool {
		var state string
		err := pool.QueryRow(ctx, `SELECT j.state FROM ferry_workflow_step s JOIN river_job j ON j.id = s.job_id
			WHERE s.workflow_id = 'dag' AND s.name = 'slow'`).Scan(&state)
		return err == nil && state == "running"
	})

	b := newBrowser(t, chrome)
	b.do("open the workflows page", chromedp.Navigate(base+"/admin/workflows"), chromedp.WaitVisible(chromedp.CSS(`tr[data-workflow="dag"]`)))
	b.do("open the workflow", chromedp.Click(`tr[data-workflow="dag"] a`), chromedp.WaitVisible(chromedp.CSS("svg.dag")))
	require.Equal(t, 3, b.matches("svg.dag g[data-step]"))
	require.Equal(t, 2, b.matches("svg.dag line"))
	require.Equal(t, 1, b.matches(`svg.dag g[data-step="slow"][data-state="running"]`))
	require.Equal(t, 1, b.matches(`svg.dag g[data-step="after"][data-state="pending"]`))
	var slowJob int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT job_id FROM ferry_workflow_step WHERE workflow_id = 'dag' AND name = 'slow'`).Scan(&slowJob))
	require.Equal(t, 1, b.matches(fmt.Sprintf(`svg.dag a[href="/riverui/jobs/%d"]`, slowJob)), "the step links to its job in River UI")
	_, err = chromedp.Run(b.step(), chromedp.Evaluate[bool](`window.notReloaded = true`))
	require.NoError(t, err)

	// The slow step is cancelled: "after" is cancelled with it, and the
	// page shows both without a reload.
	cancel := proctest.Start(t, bins["./cmd/enqueue"], env, "jobs", "cancel", fmt.Sprint(slowJob))
	code, err = cancel.Wait(startTimeout)
	require.NoError(t, err)
	require.Zero(t, code)
	_, err = chromedp.Run(b.step(), chromedp.Poll[bool](
		`document.querySelector('svg.dag g[data-step="after"][data-state="cancelled"]') !== null`,
		chromedp.WithPollingInterval(pollEvery)))
	require.NoError(t, err, "the page shows the cancelled steps")
	stayed, err := chromedp.Run(b.step(), chromedp.Evaluate[bool](`window.notReloaded === true && Number(document.body.dataset.live) > 0`))
	require.NoError(t, err)
	require.True(t, stayed, "the page changed in place")
}

// matches is the number of elements matching css.
func (b *browser) matches(css string) int {
	b.t.Helper()
	n, err := chromedp.Run(b.step(), chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, css)))
	require.NoError(b.t, err)
	return n
}
