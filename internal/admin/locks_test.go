package admin

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/locks"
)

func TestServer_Locks(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Console: newFakeConsole()})

	code, body := get(t, b.base+"/admin/locks", nil)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<tr data-lock="nightly-report">`)
	require.Contains(t, body, "web-1:4242")
	require.Contains(t, body, `<td class="num">7</td>`)
	require.Contains(t, body, `<td class="num">20s</td>`)

	code, body = get(t, b.base+"/admin/api/locks", nil)
	require.Equal(t, http.StatusOK, code, body)
	var hs []locks.Holder
	require.NoError(t, json.Unmarshal([]byte(body), &hs))
	require.Len(t, hs, 1)
	require.Equal(t, "web-1:4242", hs[0].Holder)
	require.EqualValues(t, 7, hs[0].Token)
}
