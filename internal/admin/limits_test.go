package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/limit"
)

func TestServer_Limits(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Console: newFakeConsole()})

	code, body := get(t, b.base+"/admin/limits", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<tr data-limit="per-tenant">`)
	require.Contains(t, body, `<td>kind email.send</td>`)
	require.Contains(t, body, `<td class="num">10/s burst 5</td>`)
	require.Contains(t, body, `<tr class="key" data-key="acme">`)
	require.Contains(t, body, `<td class="num">7</td>`)

	code, body = get(t, b.base+"/admin/api/limits", nil)
	require.Equal(t, http.StatusOK, code, body)
	var ls []limit.Status
	require.NoError(t, json.Unmarshal([]byte(body), &ls))
	require.Len(t, ls, 1)
	require.Equal(t, 7, ls[0].Waiting)
}

func TestServer_Fairness(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Console: newFakeConsole()})

	code, body := get(t, b.base+"/admin/limits", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<tr data-limit="per-tenant">`, "the limits as before")
	require.Contains(t, body, `<table id="fairness">`)
	require.Contains(t, body, "<tr data-fair=\"imports\">\n<td>imports</td>\n<td>tenant</td>\n"+
		`<td class="num">default 0.5</td>`+"\n"+`<td class="num">30</td>`+"\n"+`<td class="num">2</td>`+"\n"+`<td class="num">62</td>`,
		"the queue: key field, default weight, waiting, running, started")
	require.Contains(t, body, "<tr class=\"key\" data-key=\"acme\">\n<td></td><td>= &#34;acme&#34;</td>\n"+
		`<td class="num">3</td>`+"\n"+`<td class="num">9</td>`+"\n"+`<td class="num">2</td>`+"\n"+`<td class="num">41</td>`,
		"a key: weight, waiting, running, started")
	require.Contains(t, body, `data-key="t18"`)
	require.NotContains(t, body, `data-key="t19"`, "the busiest 20 keys")
	require.Contains(t, body, "… and 2 more keys")

	code, body = get(t, b.base+"/admin/api/fairness", nil)
	require.Equal(t, http.StatusOK, code, body)
	var fs []limit.FairStatus
	require.NoError(t, json.Unmarshal([]byte(body), &fs))
	require.Len(t, fs, 1)
	require.Len(t, fs[0].Keys, 22, "every key")
	require.Equal(t, limit.FairKeyStatus{Key: "acme", Weight: 3, Running: 2, Waiting: 9, Started: 41}, fs[0].Keys[0])
}

// Without a fair queue the limits page has no fairness table.
func TestServer_FairnessNone(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Console: noFairConsole{newFakeConsole()}})
	code, body := get(t, b.base+"/admin/limits", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<tr data-limit="per-tenant">`)
	require.NotContains(t, body, "Fair queues")
	code, body = get(t, b.base+"/admin/api/fairness", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `[]`, body)
}

type noFairConsole struct{ *fakeConsole }

func (noFairConsole) Fairness(context.Context) ([]limit.FairStatus, error) { return nil, nil }
