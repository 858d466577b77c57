package admin

import (
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
