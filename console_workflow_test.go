package ferry_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

// TestConsole_Workflows: a server's console lists workflows at
// /admin/workflows, draws one at /admin/workflows/<id> (each step a box
// of its state's colour, linked to River UI's page of its job, with an
// edge per dependency), has their JSON at /admin/api/workflows[/<id>],
// and answers 404 for a workflow it does not have.
func TestConsole_Workflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	srv, err := ferry.New(ctx, quietConfig(url))
	require.NoError(t, err)
	runServer(t, srv)
	pool := pgtest.PoolFor(t, url)
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil), jobs.WithSchema(""))
	require.NoError(t, err)
	wf := workflow.New("order 1234")
	wf.ID = "order-1234"
	wf.Add("charge", jobs.NoopArgs{}).Add("reserve", jobs.NoopArgs{})
	wf.Add("ship", jobs.NoopArgs{}, workflow.After("charge", "reserve")).Add("notify", jobs.NoopArgs{}, workflow.After("ship"))
	var res *workflow.Result
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		res, err = workflow.InsertTx(ctx, tx, ins, wf)
		return err
	}))
	require.Eventually(t, func() bool {
		in, err := workflow.Get(ctx, pool, "order-1234")
		require.NoError(t, err)
		return in.State == "completed"
	}, 20*time.Second, 20*time.Millisecond)

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + srv.AdminAddr() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/admin/workflows")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `href="/admin/workflows/order-1234"`)
	require.Contains(t, body, `4/4 (4 completed, 0 failed, 0 skipped)`)

	code, body = get("/admin/workflows/order-1234")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<svg class="dag" data-steps="4"`)
	for _, step := range []string{"charge", "reserve", "ship", "notify"} {
		require.Contains(t, body, `<g data-step="`+step+`" data-state="completed">`)
		require.Contains(t, body, `href="/riverui/jobs/`+strconv.FormatInt(res.Jobs[step], 10)+`"`)
	}
	require.Equal(t, 3, strings.Count(body, "<line "), "an edge per dependency")

	code, body = get("/admin/api/workflows/order-1234")
	require.Equal(t, http.StatusOK, code)
	var item struct {
		Workflow workflow.Info `json:"workflow"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &item))
	require.Equal(t, "completed", item.Workflow.State)
	require.Len(t, item.Workflow.Steps, 4)

	code, body = get("/admin/api/workflows")
	require.Equal(t, http.StatusOK, code)
	var list []workflow.Info
	require.NoError(t, json.Unmarshal([]byte(body), &list))
	require.Len(t, list, 1)

	code, _ = get("/admin/workflows/nope")
	require.Equal(t, http.StatusNotFound, code)
	code, _ = get("/admin/api/workflows/nope")
	require.Equal(t, http.StatusNotFound, code)
}
