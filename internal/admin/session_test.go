package admin

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/logtest"
)

// sessionOf returns the session cookie a response sets, failing the test
// when there is none.
func sessionOf(t *testing.T, resp *http.Response) *http.Cookie {
	t.Helper()
	for _, c := range resp.Cookies() {
		if c.Name == SessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", SessionCookie, resp.Header["Set-Cookie"])
	return nil
}

func withCookie(c *http.Cookie) func(*http.Request) {
	return func(r *http.Request) { r.AddCookie(c) }
}

// The sign-in page takes the token once and sets a session cookie that
// opens every page, River UI and the JSON, on every replica with the same
// token, until it expires or the browser signs out.
func TestServer_Login(t *testing.T) {
	t.Parallel()
	const token = "adm1n-T0KEN-sign-in"
	logs := &logtest.Recorder{}
	ui := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("river ui")) })
	b := setup(t, Config{Token: token, Console: newFakeConsole(), RiverUI: ui, Logger: logs.Logger(), Replica: "host-a_99"})
	login := b.base + loginPath
	origin := map[string]string{"Origin": b.base}

	code, body := get(t, login+"?next="+url.QueryEscape("/admin/outbox"), nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<form method="post" action="/admin/login" id="login"`)
	require.Contains(t, body, `<input type="hidden" name="next" value="/admin/outbox">`)
	require.Contains(t, body, `type="password"`)
	require.NotContains(t, body, `<nav>`, "no navigation before signing in")
	require.NotContains(t, body, token)

	t.Run("wrong token", func(t *testing.T) {
		resp, body := post(t, login, url.Values{"token": {"nope"}, "next": {"/admin/outbox"}}, origin)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Empty(t, resp.Cookies(), "no session")
		require.Contains(t, body, `id="login-failed"`)
		require.NotContains(t, body, "nope")
		require.Equal(t, "WARN", logs.Find(t, "admin: sign-in refused: wrong token")["level"])
	})
	t.Run("cross-site form", func(t *testing.T) {
		resp, _ := post(t, login, url.Values{"token": {token}}, map[string]string{"Origin": "http://evil.example"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.Empty(t, resp.Cookies())
	})

	resp, _ := post(t, login, url.Values{"token": {token}, "next": {"/admin/outbox"}}, origin)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/outbox", resp.Header.Get("Location"), "back to the page asked for")
	session := sessionOf(t, resp)
	require.True(t, session.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, session.SameSite)
	require.Equal(t, "/", session.Path)
	require.False(t, session.Secure, "plain HTTP")
	require.Equal(t, int(SessionTTL/time.Second), session.MaxAge)
	require.NotContains(t, session.Value, token)
	require.Len(t, logs.All("admin: signed in"), 1)
	require.Equal(t, "12h0m0s", logs.Find(t, "admin: signed in")["expires_in"])
	require.NotContains(t, logs.String(), token, "the token is never logged")

	for _, p := range append(append([]string{"/riverui/", "/metrics"}, pages...), apis...) {
		code, body := get(t, b.base+p, withCookie(session))
		require.Equal(t, http.StatusOK, code, p)
		require.NotContains(t, body, token, p)
	}
	resp, err := noRedirect.Do(func() *http.Request {
		r, _ := http.NewRequest(http.MethodGet, login+"?next=/admin/workers", nil)
		r.AddCookie(session)
		return r
	}())
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "signed in already")
	require.Equal(t, "/admin/workers", resp.Header.Get("Location"))
	code, body = get(t, b.base+"/admin/", withCookie(session))
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<form method="post" action="/admin/logout" class="inline" id="logout">`)

	t.Run("another replica with the same token", func(t *testing.T) {
		other := setup(t, Config{Token: token, Console: newFakeConsole()})
		code, _ := get(t, other.base+"/admin/api/summary", withCookie(session))
		require.Equal(t, http.StatusOK, code)
	})
	t.Run("a replica with another token", func(t *testing.T) {
		other := setup(t, Config{Token: "another-token", Console: newFakeConsole()})
		code, _ := get(t, other.base+"/admin/api/summary", withCookie(session))
		require.Equal(t, http.StatusUnauthorized, code)
	})
	t.Run("tampered", func(t *testing.T) {
		for _, v := range []string{
			"", "v1", "v1.9999999999", "v1.9999999999." + strings.Repeat("A", 43),
			strings.Replace(session.Value, "v1.", "v1.9", 1), // a later expiry, the old signature
			session.Value + "A", "v2" + strings.TrimPrefix(session.Value, "v1"),
		} {
			code, _ := get(t, b.base+"/admin/api/summary", withCookie(&http.Cookie{Name: SessionCookie, Value: v}))
			require.Equal(t, http.StatusUnauthorized, code, "%q", v)
		}
	})
	t.Run("expired", func(t *testing.T) {
		later := setup(t, Config{Token: token, Console: newFakeConsole()})
		later.srv.now = func() time.Time { return time.Now().Add(SessionTTL + time.Minute) }
		code, _ := get(t, later.base+"/admin/api/summary", withCookie(session))
		require.Equal(t, http.StatusUnauthorized, code)
	})

	resp, _ = post(t, b.base+"/admin/logout", nil, map[string]string{"Origin": b.base, "Cookie": SessionCookie + "=" + session.Value})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, loginPath, resp.Header.Get("Location"))
	cleared := sessionOf(t, resp)
	require.Negative(t, cleared.MaxAge, "the browser drops the cookie")
	require.Empty(t, cleared.Value)
	require.True(t, cleared.HttpOnly)
}

// Behind a proxy that terminates TLS the browser's Origin says https, and
// the cookie is Secure.
func TestServer_LoginSecureBehindTLS(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Token: "tok"})
	host := strings.TrimPrefix(b.base, "http://")
	resp, _ := post(t, b.base+loginPath, url.Values{"token": {"tok"}},
		map[string]string{"Origin": "https://" + host, "Sec-Fetch-Site": "same-origin"})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/", resp.Header.Get("Location"), "no next: the summary")
	require.True(t, sessionOf(t, resp).Secure)
}

// Without a token there is nothing to sign in to.
func TestServer_LoginWithoutToken(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Console: newFakeConsole()})
	resp, err := noRedirect.Get(b.base + loginPath)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/", resp.Header.Get("Location"))
	_, body := get(t, b.base+"/admin/", nil)
	require.NotContains(t, body, `id="logout"`)
}

func TestNextPath(t *testing.T) {
	t.Parallel()
	for next, want := range map[string]string{
		"":                          "/admin/",
		"/admin/outbox":             "/admin/outbox",
		"/riverui/jobs/7?x=1":       "/riverui/jobs/7?x=1",
		"//evil.example/admin/":     "/admin/",
		"/\\evil.example":           "/admin/",
		"https://evil.example/":     "/admin/",
		"javascript:alert(1)":       "/admin/",
		"admin/outbox":              "/admin/",
		"/admin/login?next=/admin/": "/admin/",
		"/admin/\r\nSet-Cookie: x":  "/admin/",
	} {
		require.Equal(t, want, nextPath(next), "%q", next)
	}
}

// The summary page and its JSON: the replica that answered, the leader,
// stuck deliveries, running and failed jobs, late schedules.
func TestServer_Summary(t *testing.T) {
	t.Parallel()
	c := newFakeConsole()
	c.late = []LateSchedule{{ID: "nightly", Name: "Nightly report", NextRunAt: time.Now().Add(-10 * time.Minute)}}
	b := setup(t, Config{Console: c, RiverUI: http.NotFoundHandler(), Replica: "host-a_99_20260101T000000.000000"})

	resp, err := http.Get(b.base + "/admin/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "host-a_99_20260101T000000.000000", resp.Header.Get("Ferry-Replica"))

	_, body := get(t, b.base+"/admin/", nil)
	for _, want := range []string{
		`<span class="id" id="replica-name">host-a_99_20260101T000000.000000</span>`,
		`<span class="state s-leader" id="replica-role">leader</span>`,
		`<span class="id" id="leader-name">ferry-leader:host-a:99</span>`,
		`<span class="count bad" id="stuck-deliveries">4</span>`,
		`<span class="count bad" id="stuck-messages">1</span> message with no route`,
		`<span class="count" id="jobs-running">7</span>`,
		`<span class="count warn" id="jobs-retryable">2</span>`,
		`<span class="count bad" id="jobs-discarded">5</span>`,
		`<li data-schedule="nightly">Nightly report`,
		`<span class="rel">10m 0s ago</span>`,
		`<a href="/riverui/jobs?state=running">`,
		`answered by <span class="id">host-a_99_20260101T000000.000000</span>`,
	} {
		require.Contains(t, body, want)
	}

	_, body = get(t, b.base+"/admin/api/summary", nil)
	require.Contains(t, body, `{"replica":{"name":"host-a_99_20260101T000000.000000","hostname":"host-a","pid":99,"role":"leader","term":3},`)
	require.Contains(t, body, `"stuck_deliveries":4,"stuck_messages":1,"jobs":{"running":7,"retryable":2,"discarded":5},`)
	require.Contains(t, body, `"late_schedules":[{"id":"nightly","name":"Nightly report","next_run_at":"`)
}

// How each term ended, read from its row, its successor and the lock.
func TestLeaderPage_TermEnds(t *testing.T) {
	t.Parallel()
	at := time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC)
	term := func(n int64, resigned bool, reason string) election.Term {
		tm := election.Term{Term: n, Holder: "ferry-leader:h:1", AcquiredAt: at.Add(time.Duration(n) * time.Minute)}
		if resigned {
			tm.ResignedAt = ptr(at)
		}
		if reason != "" {
			tm.EndedReason = ptr(reason)
		}
		return tm
	}
	ends := func(v LeaderView) []string {
		var out []string
		for _, tv := range leaderPage(v).Terms {
			out = append(out, tv.End)
		}
		return out
	}
	history := []election.Term{
		term(6, false, ""), term(5, false, "superseded"), term(4, false, "abandoned: runnables did not stop within 15s"),
		term(3, true, "resigned"), term(2, false, "superseded"),
	}

	// Term 6 holds the lock.
	live := LeaderView{Holder: &election.Holder{Term: ptr(int64(6))}, Terms: history}
	require.Equal(t, []string{"leading", "superseded", "abandoned", "resigned", "superseded"}, ends(live))
	p := leaderPage(live)
	require.Contains(t, p.Terms[1].EndDetail, "term 6 took over")
	require.Contains(t, p.Terms[2].EndDetail, "runnables did not stop within 15s")

	// Term 6 crashed, and no one has the lock yet (or a new holder has not
	// recorded its term): it did not resign, and it has no successor.
	for _, h := range []*election.Holder{nil, {Term: nil}} {
		require.Equal(t, []string{"crashed", "superseded", "abandoned", "resigned", "superseded"},
			ends(LeaderView{Holder: h, Terms: history}))
	}
	// A resigned term is resigned whoever holds the lock.
	require.Equal(t, []string{"resigned"}, ends(LeaderView{Terms: []election.Term{term(3, true, "resigned")}}))
}
