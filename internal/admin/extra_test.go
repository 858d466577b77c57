package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/capability"
)

// thingsPage is a capability's page: a count and a hostile name.
func thingsPage(data func(context.Context) (any, error)) capability.Page {
	return capability.Page{
		Name: "things", Title: "Things",
		Template: `<h1>Things</h1><p id="count">{{.Data.Count}}</p><p id="name">{{.Data.Name}}</p>`,
		Data:     data,
	}
}

type things struct {
	Count int    `json:"count"`
	Name  string `json:"name"`
}

// TestServer_CapabilityPages: a page a capability records is served in the
// console's layout, behind its token, linked from every page, and its data
// as JSON; its data's failure is not rendered.
func TestServer_CapabilityPages(t *testing.T) {
	t.Parallel()
	fail := errors.New("secret detail")
	b := setup(t, Config{Console: newFakeConsole(), Token: "tok", Pages: []capability.Page{
		thingsPage(func(context.Context) (any, error) { return things{Count: 3, Name: "<script>x</script>"}, nil }),
		{Name: "broken", Title: "Broken", Template: `{{define "content"}}never{{end}}`, Data: func(context.Context) (any, error) { return nil, fail }},
	}})
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") }

	code, _ := get(t, b.base+"/admin/things", nil)
	require.Equal(t, http.StatusUnauthorized, code, "behind the token like every page")
	code, _ = get(t, b.base+"/admin/api/things", nil)
	require.Equal(t, http.StatusUnauthorized, code)

	code, body := get(t, b.base+"/admin/things", bearer)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<p id="count">3</p>`)
	require.Contains(t, body, `<p id="name">&lt;script&gt;x&lt;/script&gt;</p>`, "escaped as every page is")
	require.Contains(t, body, `<a href="/admin/things" class="on">Things</a>`, "its own link is on")
	require.Contains(t, body, `<a href="/admin/outbox"`, "in the console's layout")

	_, index := get(t, b.base+"/admin/", bearer)
	require.Contains(t, index, `<a href="/admin/things">Things</a>`, "every page links to it")
	require.Contains(t, index, `<a href="/admin/broken">Broken</a>`)

	code, body = get(t, b.base+"/admin/api/things", bearer)
	require.Equal(t, http.StatusOK, code)
	var got things
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, things{Count: 3, Name: "<script>x</script>"}, got)

	code, body = get(t, b.base+"/admin/broken", bearer)
	require.Equal(t, http.StatusInternalServerError, code)
	require.NotContains(t, body, "secret detail")
	code, body = get(t, b.base+"/admin/api/broken", bearer)
	require.Equal(t, http.StatusInternalServerError, code)
	require.NotContains(t, body, "secret detail")
}

// TestNew_RefusesABadCapabilityPage: a page whose name is taken or not a
// path segment, without a title or data, or with a bad template, stops
// the server's New with the page named.
func TestNew_RefusesABadCapabilityPage(t *testing.T) {
	t.Parallel()
	data := func(context.Context) (any, error) { return nil, nil }
	for want, p := range map[string]capability.Page{
		`page "leader": the name is taken`: {Name: "leader", Title: "L", Data: data},
		`page "api": the name is taken`:    {Name: "api", Title: "A", Data: data},
		`page "Big": a name is lowercase`:  {Name: "Big", Title: "B", Data: data},
		`page "a/b": a name is lowercase`:  {Name: "a/b", Title: "B", Data: data},
		`page "t": a page needs a title`:   {Name: "t", Data: data},
		`page "d": a page needs a title`:   {Name: "d", Title: "D"},
		`parse page bad`:                   {Name: "bad", Title: "B", Template: `{{define "content"}}{{.Data`, Data: data},
	} {
		_, err := New(Config{Addr: "127.0.0.1:0", Console: newFakeConsole(), Pages: []capability.Page{p}})
		require.ErrorContains(t, err, want)
	}
	_, err := New(Config{Addr: "127.0.0.1:0", Console: newFakeConsole(), Pages: []capability.Page{thingsPage(data), thingsPage(data)}})
	require.ErrorContains(t, err, `page "things": the name is taken`, "two capabilities' pages of one name")
}
