package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/locks"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// fakeConsole is a Console with fixed data that counts its calls.
type fakeConsole struct {
	calls    atomic.Int32
	resets   atomic.Int32
	fail     error // every call fails with it when set
	mu       sync.Mutex
	resetIDs [][]int64
	sched    []periodic.Row
	stuck    []outbox.Delivery
	workers  []liveness.WorkerInfo
	late     []LateSchedule
	since    atomic.Int64 // the last Workers call's since
}

func ptr[T any](v T) *T { return &v }

func newFakeConsole() *fakeConsole {
	next := time.Now().Add(42 * time.Minute)
	last := time.Now().Add(-18 * time.Minute)
	return &fakeConsole{
		sched: []periodic.Row{{
			ID: "warm-cache", Name: "Warm the cache", Trigger: "every 1h", Zone: "UTC", Kind: "http.request", Queue: "default",
			NextRunAt: &next, LastTickAt: &last, LastStatus: ptr("enqueued"), LastJobID: ptr(int64(77)), LastJobState: ptr("completed"),
		}},
		stuck: []outbox.Delivery{{
			MessageID: 5, Topic: "order.placed", MessageStatus: "stuck", Route: ptr("billing"), Status: ptr("stuck"),
			Attempts: ptr(24), LastError: ptr("POST http://billing/hook: 503 Service Unavailable"), CreatedAt: time.Now().Add(-time.Hour),
		}},
		workers: []liveness.WorkerInfo{
			{ID: 1, ClientID: "host-a_99_20260101T000000.000000", Hostname: "host-a", PID: 99, State: liveness.StateAlive,
				StartedAt: time.Now().Add(-2 * time.Hour), LastSeenAt: time.Now().Add(-time.Second), RunningJobs: 7},
			{ID: 2, ClientID: "host-b_42_20260101T000000.000000", Hostname: "host-b", PID: 42, State: liveness.StateDead,
				StartedAt: time.Now().Add(-3 * time.Hour), LastSeenAt: time.Now().Add(-10 * time.Minute),
				DeadAt: ptr(time.Now().Add(-9 * time.Minute)), RescuedJobs: 12},
		},
	}
}

func (c *fakeConsole) Leader(context.Context) (LeaderView, error) {
	c.calls.Add(1)
	acquired := time.Now().Add(-3 * time.Hour)
	return LeaderView{
		Key: 911000001,
		Holder: &election.Holder{Key: 911000001, BackendPID: 4321, ApplicationName: "ferry-leader:host-a:99", ClientAddr: "127.0.0.1:5555",
			SessionState: "idle", Term: ptr(int64(3)), Hostname: "host-a", PID: ptr(99), AcquiredAt: &acquired, StartedAt: &acquired},
		Terms: []election.Term{
			{Term: 3, Holder: "ferry-leader:host-a:99", Hostname: "host-a", PID: 99, BackendPID: 4321, AcquiredAt: acquired},
			{Term: 2, Holder: "ferry-leader:host-b:42", Hostname: "host-b", PID: 42, BackendPID: 4000, AcquiredAt: acquired.Add(-time.Hour),
				EndedReason: ptr("superseded")},
			{Term: 1, Holder: "ferry-leader:host-a:7", Hostname: "host-a", PID: 7, BackendPID: 3000, AcquiredAt: acquired.Add(-2 * time.Hour),
				ResignedAt: ptr(acquired.Add(-time.Hour)), EndedReason: ptr("resigned")},
		},
	}, c.fail
}

func (c *fakeConsole) Summary(context.Context) (Summary, error) {
	c.calls.Add(1)
	acquired := time.Now().Add(-3 * time.Hour)
	return Summary{
		Replica: Replica{Name: "host-a_99_20260101T000000.000000", Hostname: "host-a", PID: 99, Role: "leader", Term: 3},
		Leader: &election.Holder{Key: 911000001, BackendPID: 4321, ApplicationName: "ferry-leader:host-a:99", Term: ptr(int64(3)),
			Hostname: "host-a", PID: ptr(99), AcquiredAt: &acquired},
		StuckDeliveries: 4,
		StuckMessages:   1,
		Jobs:            JobCounts{Running: 7, Retryable: 2, Discarded: 5},
		LateSchedules:   c.late,
	}, c.fail
}

func (c *fakeConsole) Schedules(context.Context) ([]periodic.Row, error) {
	c.calls.Add(1)
	return c.sched, c.fail
}

func (c *fakeConsole) Outbox(context.Context) (OutboxView, error) {
	c.calls.Add(1)
	return OutboxView{
		Stats: []outbox.Stat{{Topic: "order.placed", Status: "stuck", Count: 1, Of: outbox.StatMessages}, {Topic: "order.placed", Route: "billing", Status: "stuck", Count: 1, Of: outbox.StatDeliveries}},
		Stuck: c.stuck,
	}, c.fail
}

func (c *fakeConsole) ResetOutbox(_ context.Context, ids []int64) (int, int, error) {
	c.calls.Add(1)
	c.resets.Add(1)
	c.mu.Lock()
	c.resetIDs = append(c.resetIDs, ids)
	c.mu.Unlock()
	return len(ids), len(ids), c.fail
}

func (c *fakeConsole) Telegram(context.Context) ([]telegram.BotStatus, error) {
	c.calls.Add(1)
	return []telegram.BotStatus{{Bot: "desk", State: telegram.StatePolling, Term: 3, LastUpdateID: 1234, UpdatesStored: 9,
		LastErrorKind: "unauthorized", LastErrorAt: time.Now().Add(-time.Minute)}}, c.fail
}

func (c *fakeConsole) Workers(_ context.Context, since time.Duration) ([]liveness.WorkerInfo, error) {
	c.calls.Add(1)
	c.since.Store(int64(since))
	return c.workers, c.fail
}

func (c *fakeConsole) Locks(context.Context) ([]locks.Holder, error) {
	c.calls.Add(1)
	return []locks.Holder{{Name: "nightly-report", Token: 7, Holder: "web-1:4242", AcquiredAt: time.Now().Add(-time.Minute), ExpiresIn: 20 * time.Second}}, c.fail
}

func (c *fakeConsole) Limits(context.Context) ([]limit.Status, error) {
	c.calls.Add(1)
	return []limit.Status{{
		Limit:   limit.Limit{Name: "per-tenant", Kind: "email.send", KeyField: "tenant_id", Concurrency: 2, Rate: limit.Rate{Count: 10, Period: time.Second, Burst: 5}},
		Running: 2, Tokens: 3, Waiting: 7,
		Keys: []limit.KeyStatus{{Key: "acme", Running: 2, Tokens: 3, Waiting: 7}},
	}}, c.fail
}

// Fairness is one fair queue of 22 keys: acme (weight 3) the busiest,
// then t00…t20 (the default weight, 0.5).
func (c *fakeConsole) Fairness(context.Context) ([]limit.FairStatus, error) {
	c.calls.Add(1)
	f := limit.FairStatus{Queue: "imports", KeyField: "tenant", Fairness: limit.Fairness{Weights: map[string]float64{"acme": 3}, DefaultWeight: 0.5},
		Running: 2, Waiting: 9 + 21}
	f.Keys = append(f.Keys, limit.FairKeyStatus{Key: "acme", Weight: 3, Running: 2, Waiting: 9, Started: 41})
	for i := range 21 {
		f.Keys = append(f.Keys, limit.FairKeyStatus{Key: fmt.Sprintf("t%02d", i), Weight: 0.5, Waiting: 1, Started: 1})
	}
	return []limit.FairStatus{f}, c.fail
}

// pages and apis are every GET that calls the Console.
var (
	pages = []string{"/admin/", "/admin/leader", "/admin/workers", "/admin/schedules", "/admin/outbox", "/admin/locks", "/admin/limits", "/admin/telegram"}
	apis  = []string{"/admin/api/summary", "/admin/api/leader", "/admin/api/workers", "/admin/api/schedules", "/admin/api/outbox", "/admin/api/locks", "/admin/api/limits", "/admin/api/fairness", "/admin/api/telegram"}
)

// noRedirect is a client that returns redirects instead of following them.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// post sends a form to url with headers hdr and returns the response
// (body read and closed).
func post(t *testing.T, target string, form url.Values, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, target, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// csrfOf reads the CSRF token from the outbox page, as a browser's form
// carries it.
func csrfOf(t *testing.T, base string, mod func(*http.Request)) string {
	t.Helper()
	code, body := get(t, base+"/admin/outbox", mod)
	require.Equal(t, http.StatusOK, code, body)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF token in the outbox page")
	return m[1]
}

func TestServer_PagesWithoutToken(t *testing.T) {
	t.Parallel()
	c := newFakeConsole()
	b := setup(t, Config{Console: c, RiverUI: http.NotFoundHandler()})

	code, body := get(t, b.base+"/admin/", nil)
	require.Equal(t, http.StatusOK, code)
	for _, p := range append(append([]string{"/riverui/"}, pages...), apis...) {
		require.Contains(t, body, `href="`+p+`"`, "the index links to %s", p)
	}

	for _, p := range pages {
		t.Run(p, func(t *testing.T) {
			resp, err := http.Get(b.base + p)
			require.NoError(t, err)
			defer resp.Body.Close()
			bb, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(bb))
			require.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
			require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'")
			require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
			require.Equal(t, "same-origin", resp.Header.Get("Referrer-Policy"))
			require.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
			require.Contains(t, string(bb), `<a href="/admin/outbox"`, "every page has the navigation")
		})
	}
	for _, p := range apis {
		t.Run(p, func(t *testing.T) {
			resp, err := http.Get(b.base + p)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		})
	}

	_, body = get(t, b.base+"/admin/schedules", nil)
	require.Contains(t, body, "Warm the cache")
	require.Contains(t, body, `<a href="/riverui/jobs/77">job 77</a>`)
	require.Regexp(t, `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</span> <span class="rel">in 4[12]m \d+s</span>`, body, "next run in UTC, with a hint")
	require.Regexp(t, `<span class="rel">1[78]m \d+s ago</span>`, body, "last tick, with a hint")

	_, body = get(t, b.base+"/admin/leader", nil)
	require.Contains(t, body, "ferry-leader:host-a:99")
	require.Contains(t, body, "3h 0m ago")
	require.Contains(t, body, `<tr data-term="3" data-end="leading">`)
	require.Contains(t, body, `<tr data-term="2" data-end="superseded">`)
	require.Contains(t, body, "term 3 took over after the deferral")
	require.Contains(t, body, `<tr data-term="1" data-end="resigned">`)
	_, body = get(t, b.base+"/admin/api/leader", nil)
	require.Contains(t, body, `"term":2,"holder":"ferry-leader:host-b:42"`, "a term's fields stay where they were")
	require.Contains(t, body, `"ended_reason":"superseded","end":"superseded","end_detail":"never resigned`)

	_, body = get(t, b.base+"/admin/outbox", nil)
	require.Contains(t, body, "503 Service Unavailable")
	require.Contains(t, body, `name="message_id" value="5"`)

	_, body = get(t, b.base+"/admin/telegram", nil)
	require.Contains(t, body, "desk")
	require.Contains(t, body, "unauthorized")

	_, body = get(t, b.base+"/admin/workers", nil)
	require.Contains(t, body, `<tr data-worker="host-a_99_20260101T000000.000000" data-state="alive">`)
	require.Regexp(t, `data-state="alive">(?s:.)*<td class="num running">7</td>`, body, "an alive worker's running jobs")
	require.Regexp(t, `data-state="dead">(?s:.)*<span class="rel">9m 0s ago</span></td>\n<td class="num rescued">12</td>`, body,
		"a dead worker: when, and what was rescued")
	require.Contains(t, body, "in the last hour.")
	require.Equal(t, int64(time.Hour), c.since.Load(), "dead and stopped workers of the last hour")

	_, body = get(t, b.base+"/admin/api/workers", nil)
	require.Contains(t, body, `[{"id":1,"client_id":"host-a_99_20260101T000000.000000","hostname":"host-a","pid":99,"state":"alive",`,
		"the workers API is a list of workers")
	require.Contains(t, body, `"running_jobs":7,"stopped_at":null,"dead_at":null,"rescued_jobs":0}`)
	require.Contains(t, body, `"rescued_jobs":12}]`)

	_, body = get(t, b.base+"/admin/api/schedules", nil)
	require.Contains(t, body, `"name":"Warm the cache"`)
	_, body = get(t, b.base+"/admin/api/telegram", nil)
	require.Contains(t, body, `[{"bot":"desk","state":"polling"`, "the telegram API is a list of bot statuses")

	resp, err := noRedirect.Get(b.base + "/")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/", resp.Header.Get("Location"))
}

func TestServer_EmptyConsoleAnswersLists(t *testing.T) {
	t.Parallel()
	c := newFakeConsole()
	c.sched, c.stuck, c.workers = nil, nil, nil
	b := setup(t, Config{Console: c})
	_, body := get(t, b.base+"/admin/api/schedules", nil)
	require.JSONEq(t, `[]`, body)
	_, body = get(t, b.base+"/admin/api/workers", nil)
	require.JSONEq(t, `[]`, body)
	_, body = get(t, b.base+"/admin/workers", nil)
	require.Contains(t, body, `<p class="muted" id="no-workers">No worker alive, and none dead or stopped in the last hour.</p>`)
	code, body := get(t, b.base+"/admin/schedules", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "No schedule.")
	_, body = get(t, b.base+"/admin/outbox", nil)
	require.Contains(t, body, "Nothing is stuck.")
	require.NotContains(t, body, `href="/riverui/`, "no River UI link without River UI")
	_, body = get(t, b.base+"/admin/", nil)
	require.Contains(t, body, `id="no-late"`)
	require.NotContains(t, body, `href="/riverui/`, "no River UI link without River UI")
	_, body = get(t, b.base+"/admin/api/summary", nil)
	require.Contains(t, body, `"late_schedules":[]`)
}

func TestServer_LoopbackHostOnlyWithoutToken(t *testing.T) {
	t.Parallel()
	c := newFakeConsole()
	b := setup(t, Config{Console: c})
	rebound := func(r *http.Request) { r.Host = "attacker.example:" + r.URL.Port() }
	code, _ := get(t, b.base+"/admin/api/outbox", rebound)
	require.Equal(t, http.StatusForbidden, code, "a DNS-rebound name is refused without a token")
	code, _ = get(t, b.base+"/healthz", rebound)
	require.Equal(t, http.StatusOK, code)
	code, _ = get(t, b.base+"/admin/api/outbox", func(r *http.Request) { r.Host = "localhost:" + r.URL.Port() })
	require.Equal(t, http.StatusOK, code)
	require.EqualValues(t, 1, c.calls.Load())
}

func TestServer_TokenGuardsEverything(t *testing.T) {
	t.Parallel()
	const token = "adm1n-T0KEN-do-not-show"
	c := newFakeConsole()
	var uiCalls atomic.Int32
	ui := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { uiCalls.Add(1) })
	b := setup(t, Config{Token: token, Console: c, RiverUI: ui})

	bad := map[string]func(*http.Request){
		"none":           nil,
		"wrong bearer":   func(r *http.Request) { r.Header.Set("Authorization", "Bearer nope") },
		"wrong password": func(r *http.Request) { r.SetBasicAuth("admin", "nope") },
		"token as user":  func(r *http.Request) { r.SetBasicAuth(token, "") },
	}
	paths := append(append([]string{"/", "/admin/", "/riverui/", "/riverui/api/jobs"}, pages...), apis...)
	for name, mod := range bad {
		t.Run(name, func(t *testing.T) {
			for _, p := range paths {
				req, err := http.NewRequest(http.MethodGet, b.base+p, nil)
				require.NoError(t, err)
				if mod != nil {
					mod(req)
				}
				resp, err := noRedirect.Do(req)
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, http.StatusUnauthorized, resp.StatusCode, p)
				require.Equal(t, `Bearer realm="ferry admin"`, resp.Header.Get("WWW-Authenticate"), "a browser does not prompt")
				require.Empty(t, resp.Header.Get("Ferry-Replica"), "an unauthenticated caller is not told which replica")
				require.NotContains(t, string(body), token)
			}
			form := url.Values{"csrf": {strings.Repeat("0", 64)}, "message_id": {"5"}}
			resp, _ := post(t, b.base+"/admin/outbox/reset", form, map[string]string{"Authorization": "Bearer nope"})
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		})
	}
	// A browser opening a page is sent to the sign-in page, which sends it
	// back afterwards; its own fetches get 401.
	for _, p := range []string{"/admin/", "/admin/outbox?reset_deliveries=1&reset_messages=1", "/riverui/jobs/7"} {
		for _, hdr := range []map[string]string{
			{"Sec-Fetch-Mode": "navigate", "Accept": "text/html"},
			{"Accept": "text/html,application/xhtml+xml"}, // a browser without Fetch Metadata
		} {
			req, err := http.NewRequest(http.MethodGet, b.base+p, nil)
			require.NoError(t, err)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := noRedirect.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, p)
			require.Equal(t, "/admin/login?next="+url.QueryEscape(p), resp.Header.Get("Location"))
		}
	}
	code, _ := get(t, b.base+"/riverui/api/jobs", func(r *http.Request) {
		r.Header.Set("Sec-Fetch-Mode", "cors")
		r.Header.Set("Accept", "application/json, text/html")
	})
	require.Equal(t, http.StatusUnauthorized, code, "River UI's own fetches are not redirected")
	require.Zero(t, c.calls.Load(), "nothing runs without the token")
	require.Zero(t, uiCalls.Load(), "River UI is not reached without the token")

	for name, mod := range map[string]func(*http.Request){
		"bearer": func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) },
		"basic":  func(r *http.Request) { r.SetBasicAuth("admin", token) },
	} {
		t.Run(name, func(t *testing.T) {
			for _, p := range append(append([]string{"/admin/", "/riverui/"}, pages...), apis...) {
				code, body := get(t, b.base+p, mod)
				require.Equal(t, http.StatusOK, code, p)
				require.NotContains(t, body, token, "the token is never rendered")
			}
		})
	}
	require.Positive(t, c.calls.Load())
	require.Positive(t, uiCalls.Load())
}

func TestServer_ResetOutbox(t *testing.T) {
	t.Parallel()
	const token = "tok"
	auth := func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+token) }
	c := newFakeConsole()
	var uiPosts atomic.Int32
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			uiPosts.Add(1)
		}
	})
	b := setup(t, Config{Token: token, Console: c, RiverUI: ui})
	csrf := csrfOf(t, b.base, auth)
	host := strings.TrimPrefix(b.base, "http://")
	target := b.base + "/admin/outbox/reset"
	hdr := func(kv ...string) map[string]string {
		h := map[string]string{"Authorization": "Bearer " + token}
		for i := 0; i+1 < len(kv); i += 2 {
			h[kv[i]] = kv[i+1]
		}
		return h
	}
	good := url.Values{"csrf": {csrf}, "message_id": {"5"}}

	refused := []struct {
		name string
		form url.Values
		hdr  map[string]string
		code int
	}{
		{"missing csrf token", url.Values{"message_id": {"5"}}, hdr("Origin", b.base), http.StatusForbidden},
		{"wrong csrf token", url.Values{"csrf": {strings.Repeat("a", 64)}, "message_id": {"5"}}, hdr("Origin", b.base), http.StatusForbidden},
		{"csrf token in the query only", url.Values{"message_id": {"5"}}, hdr("Origin", b.base), http.StatusForbidden},
		{"cross-site origin", good, hdr("Origin", "http://evil.example"), http.StatusForbidden},
		{"null origin", good, hdr("Origin", "null"), http.StatusForbidden},
		{"same host other port", good, hdr("Origin", "http://127.0.0.1:1"), http.StatusForbidden},
		{"cross-site referer", good, hdr("Referer", "http://evil.example/page"), http.StatusForbidden},
		{"sec-fetch-site cross-site", good, hdr("Sec-Fetch-Site", "cross-site"), http.StatusForbidden},
		{"sec-fetch-site with same origin", good, hdr("Sec-Fetch-Site", "cross-site", "Origin", b.base), http.StatusForbidden},
		{"no message id", url.Values{"csrf": {csrf}}, hdr("Origin", b.base), http.StatusBadRequest},
		{"bad message id", url.Values{"csrf": {csrf}, "message_id": {"5; DROP TABLE"}}, hdr("Origin", b.base), http.StatusBadRequest},
		{"negative message id", url.Values{"csrf": {csrf}, "message_id": {"-5"}}, hdr("Origin", b.base), http.StatusBadRequest},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			target := target
			if tc.name == "csrf token in the query only" {
				target += "?csrf=" + csrf
			}
			resp, body := post(t, target, tc.form, tc.hdr)
			require.Equal(t, tc.code, resp.StatusCode, body)
		})
	}
	// A GET never changes anything.
	code, _ := get(t, target+"?csrf="+csrf+"&message_id=5", auth)
	require.Equal(t, http.StatusMethodNotAllowed, code)
	// River UI's API is covered by the same cross-site check.
	resp, _ := post(t, b.base+"/riverui/api/jobs/cancel", url.Values{}, hdr("Origin", "http://evil.example"))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = post(t, b.base+"/riverui/api/jobs/cancel", url.Values{}, hdr("Sec-Fetch-Site", "cross-site"))
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Zero(t, c.resets.Load(), "no refused request reached ResetOutbox")
	require.Zero(t, uiPosts.Load(), "no refused request reached River UI")

	resp, _ = post(t, b.base+"/riverui/api/jobs/cancel", url.Values{}, hdr("Origin", b.base, "Sec-Fetch-Site", "same-origin"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.EqualValues(t, 1, uiPosts.Load())

	t.Run("same origin", func(t *testing.T) {
		form := url.Values{"csrf": {csrf}, "message_id": {"5", "9", "5"}}
		resp, _ := post(t, target, form, hdr("Origin", b.base, "Sec-Fetch-Site", "same-origin", "Referer", b.base+"/admin/outbox"))
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/admin/outbox?reset_deliveries=2&reset_messages=2", resp.Header.Get("Location"))
		require.EqualValues(t, 1, c.resets.Load())
		c.mu.Lock()
		require.Equal(t, [][]int64{{5, 9}}, c.resetIDs)
		c.mu.Unlock()
		_, body := get(t, "http://"+host+resp.Header.Get("Location"), auth)
		require.Contains(t, body, "Reset 2 deliveries of 2 messages: queued for delivery again.")
	})
	t.Run("no browser headers", func(t *testing.T) {
		resp, _ := post(t, target, good, hdr())
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a script with the token and the form token may reset")
		require.EqualValues(t, 2, c.resets.Load())
	})
}

func TestServer_ConsoleErrorsAreNotRendered(t *testing.T) {
	t.Parallel()
	c := newFakeConsole()
	c.fail = errors.New("dial postgres://ferry:s3cret@db/ferry: refused")
	b := setup(t, Config{Console: c})
	for _, p := range append(slices.Clone(pages), apis...) {
		code, body := get(t, b.base+p, nil)
		require.Equal(t, http.StatusInternalServerError, code, p)
		require.NotContains(t, body, "s3cret", p)
		require.NotContains(t, body, "refused", p)
		if strings.HasPrefix(p, "/admin/api/") {
			require.JSONEq(t, `{"error":"internal error; see the worker's log"}`, body)
		} else {
			require.Contains(t, body, "The error is in the worker&#39;s log.")
		}
	}
	csrf := csrfRE.FindStringSubmatch(func() string { _, b := get(t, b.base+"/admin/", nil); return b }())
	require.Nil(t, csrf, "the index has no form")
	resp, _ := post(t, b.base+"/admin/outbox/reset", url.Values{"csrf": {b.srv.csrf}, "message_id": {"5"}}, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/admin/outbox?reset_error=1", resp.Header.Get("Location"))
	c.fail = nil
	_, body := get(t, b.base+resp.Header.Get("Location"), nil)
	require.Contains(t, body, "The reset failed and changed nothing.")
	require.NotContains(t, body, "s3cret")
}

func TestServer_EscapesHostileStrings(t *testing.T) {
	t.Parallel()
	const hostile = `<script>alert(1)</script>`
	c := newFakeConsole()
	c.sched[0].Name = hostile
	c.sched[0].Trigger = `"><img src=x onerror=alert(2)>`
	c.stuck[0].Topic = hostile
	c.stuck[0].LastError = ptr(`</td><script>alert(3)</script>`)
	c.workers[0].ClientID = hostile
	c.workers[1].Hostname = `"><img src=x onerror=alert(4)>`
	b := setup(t, Config{Console: c})
	for _, p := range []string{"/admin/schedules", "/admin/outbox", "/admin/workers"} {
		_, body := get(t, b.base+p, nil)
		require.NotContains(t, body, "<script>", p)
		require.NotContains(t, body, "<img", p)
		require.Contains(t, body, "&lt;script&gt;alert(", p)
	}
	// A flash parameter cannot put words on the page: only counts are read.
	_, body := get(t, b.base+"/admin/outbox?reset_deliveries=<b>x</b>&reset_messages=1&flash=hello", nil)
	require.NotContains(t, body, "<b>x</b>")
	require.NotContains(t, body, "hello")
}

// With a token, every replica given it carries and accepts the same CSRF
// token, so a form one rendered can be posted to another behind a load
// balancer; without a token the key is random per start.
func TestServer_CSRFToken(t *testing.T) {
	t.Parallel()
	a := setup(t, Config{Console: newFakeConsole(), Token: "same"})
	b := setup(t, Config{Console: newFakeConsole(), Token: "same"})
	other := setup(t, Config{Console: newFakeConsole(), Token: "other"})
	require.Len(t, a.srv.csrf, 64)
	require.Equal(t, a.srv.csrf, b.srv.csrf, "derived from the token")
	require.NotEqual(t, a.srv.csrf, other.srv.csrf)
	require.NotContains(t, a.srv.csrf, "same")

	auth := func(r *http.Request) { r.Header.Set("Authorization", "Bearer same") }
	resp, body := post(t, b.base+"/admin/outbox/reset", url.Values{"csrf": {csrfOf(t, a.base, auth)}, "message_id": {"5"}},
		map[string]string{"Authorization": "Bearer same", "Origin": b.base})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a form from replica a, posted to replica b: %s", body)

	x := setup(t, Config{Console: newFakeConsole()})
	y := setup(t, Config{Console: newFakeConsole()})
	require.NotEqual(t, x.srv.csrf, y.srv.csrf, "without a token, a random key per start")
}

func TestRelative(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                "now",
		400 * time.Millisecond:           "now",
		12 * time.Second:                 "in 12s",
		-12 * time.Second:                "12s ago",
		4*time.Minute + 10*time.Second:   "in 4m 10s",
		-(2*time.Hour + 5*time.Minute):   "2h 5m ago",
		50 * time.Hour:                   "in 2d 2h",
		-(72*time.Hour + 30*time.Minute): "3d 0h ago",
	} {
		require.Equal(t, want, relative(d), d.String())
	}
}
