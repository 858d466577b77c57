package browsertest_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
	"github.com/ferryq/ferry/jobs"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	// startTimeout bounds the worker's start.
	startTimeout = 20 * time.Second
	// stepTimeout bounds one browser step, and each wait for the worker.
	stepTimeout = 15 * time.Second
	// pollEvery paces the database polls.
	pollEvery = 50 * time.Millisecond
	// scheduleID is the schedule whose next run the test reads; tickerID
	// fires every second, so it has a last job to link to River UI.
	scheduleID = "nightly-report"
	tickerID   = "heartbeat"
)

// chromium returns the path of Debian's chromium, failing the test (never
// skipping it) when it is not installed.
func chromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("browsertest: chromium is not installed; run `go tool task browser` (it installs Debian's chromium package), then test again")
	return ""
}

// secret returns a random string that names what it is, so a leak is
// easy to place.
func secret(t *testing.T, what string) string {
	t.Helper()
	b := make([]byte, 12)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return what + "-" + hex.EncodeToString(b)
}

// TestAdminConsole_Browser signs in to a real worker's admin console with
// headless Chromium on the sign-in page, reads the summary, a schedule's
// next run and the leader's terms, checks that long names keep to one line,
// resets a stuck outbox delivery by clicking its button, waits until the
// page shows it delivered, opens a job in River UI with the session, signs
// out, and keeps screenshots. Then it reads every page and JSON answer for
// the secrets the worker was given.
func TestAdminConsole_Browser(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	worker := proctest.Build(t, "./cmd/worker")["./cmd/worker"]
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	var (
		adminToken = secret(t, "admin-token")
		hookSecret = secret(t, "hook-secret")
		routeKey   = secret(t, "route-key")
		botToken   = "123456:" + secret(t, "bot-token")
		secrets    = []string{adminToken, hookSecret, routeKey, botToken}
	)

	// The webhook receiver answers 503 until open is set.
	var open atomic.Bool
	var delivered atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !open.Load() {
			http.Error(w, "receiver closed for the test", http.StatusServiceUnavailable)
			return
		}
		delivered.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	// A Bot API that refuses the token: the bot's page shows the error
	// kind, and the token must appear nowhere.
	botAPI := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"ok":false,"error_code":401,"description":"Unauthorized"}`)
	}))
	t.Cleanup(botAPI.Close)

	cfgPath := filepath.Join(t.TempDir(), "ferry.yaml")
	require.NoError(t, os.WriteFile(cfgPath, fmt.Appendf(nil, `
schedules:
  - id: %s
    name: Nightly report
    every: 1h
    kind: ferry.noop
  - id: %s
    name: Heartbeat
    every: 1s
    kind: ferry.noop
outbox:
  routes:
    - topic: order.placed
      name: billing
      url: %s/hook?key=%s
      secret_env: HOOK_SECRET
telegram:
  bots:
    - name: desk
      token_env: DESK_BOT_TOKEN
`, scheduleID, tickerID, receiver.URL, routeKey), 0o600))

	p := proctest.Start(t, worker, []string{
		"DATABASE_URL=" + url,
		"FERRY_LOG_FORMAT=json",
		"FERRY_CONFIG=" + cfgPath,
		"FERRY_ADMIN_TOKEN=" + adminToken,
		"FERRY_OUTBOX_MAX_ATTEMPTS=1",
		"FERRY_TELEGRAM_API_URL=" + botAPI.URL,
		"HOOK_SECRET=" + hookSecret,
		"DESK_BOT_TOKEN=" + botToken,
	}, "run", "--admin-addr", "127.0.0.1:0", "--leader-tick", "1s", "--standby-probe", "1s", "--shutdown-grace", "2s")
	line, err := p.WaitForLineFunc(startTimeout, logtest.Logged("admin: listening"))
	require.NoError(t, err)
	var listening struct{ Addr string }
	require.NoError(t, json.Unmarshal([]byte(line), &listening))
	base := "http://" + listening.Addr
	_, err = p.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)

	// One message, written with plain SQL, is stuck after its one attempt.
	var msgID int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`INSERT INTO ferry_outbox (topic, payload) VALUES ('order.placed', '{"order": 1}') RETURNING id`).Scan(&msgID))
	waitFor(t, "the delivery to be stuck", func() bool { return deliveryStatus(t, pool, msgID) == "stuck" })
	// The leader lists the schedules, and the ticker has fired.
	waitFor(t, "the leader to list the schedules", func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM ferry_schedule
			WHERE (id = $1 AND next_run_at IS NOT NULL) OR (id = $2 AND last_job_id IS NOT NULL)`, scheduleID, tickerID).Scan(&n)
		return err == nil && n == 2
	})

	// For the summary: a job that runs for an hour, a job that fails for
	// good (its one attempt calls a closed port), and a schedule whose next
	// run is ten minutes past, as a scheduler that stalled leaves it.
	ctx := context.Background()
	ins, err := jobs.NewInserter(pool)
	require.NoError(t, err)
	sleeper, err := ins.Client().Insert(ctx, jobs.NoopArgs{Sleep: jobs.Duration(time.Hour)}, nil)
	require.NoError(t, err)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	failing, err := ins.Client().Insert(ctx, jobs.HTTPRequestArgs{URL: closed.URL + "/gone"}, &river.InsertOpts{MaxAttempts: 1})
	require.NoError(t, err)
	waitFor(t, "one job running and one discarded", func() bool {
		return jobState(t, pool, sleeper.Job.ID) == "running" && jobState(t, pool, failing.Job.ID) == "discarded"
	})
	_, err = pool.Exec(ctx, `INSERT INTO ferry_schedule (id, name, trigger, zone, kind, queue, next_run_at)
		VALUES ('stalled-export', 'Stalled export', 'every 1h', 'UTC', 'ferry.noop', 'default', now() - interval '10 minutes')`)
	require.NoError(t, err)
	var clientID string
	require.NoError(t, pool.QueryRow(ctx, `SELECT client_id FROM ferry_worker WHERE pid = $1`, p.Pid()).Scan(&clientID))

	artifacts := os.Getenv("FERRY_TEST_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	}
	require.NoError(t, os.MkdirAll(artifacts, 0o755))

	b := newBrowser(t, chrome)
	var pagesSeen []string
	keep := func() {
		html, err := chromedp.Run(b.step(), chromedp.OuterHTML(chromedp.CSS("html")))
		require.NoError(t, err)
		pagesSeen = append(pagesSeen, html)
	}

	// Sign in: the console sends the browser to the sign-in page, which
	// refuses a wrong token and takes the right one once.
	b.do("open the console", chromedp.Navigate(base+"/admin/"), chromedp.WaitVisible(chromedp.CSS("#login")))
	require.Equal(t, base+"/admin/login?next=%2Fadmin%2F", b.location())
	title, err := chromedp.Run(b.step(), chromedp.Title())
	require.NoError(t, err)
	require.Equal(t, "ferry admin — login", title)
	keep()
	b.screenshot(filepath.Join(artifacts, "admin-login.png"))
	b.do("sign in with a wrong token", chromedp.SendKeys(chromedp.CSS("#token"), "wrong-"+adminToken[:4]),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#login-failed")))
	require.Empty(t, b.session(base), "no session after a wrong token")
	b.do("sign in", chromedp.SendKeys(chromedp.CSS("#token"), adminToken),
		chromedp.Click(chromedp.CSS(`#login button[type="submit"]`)), chromedp.WaitVisible(chromedp.CSS("#summary")))
	require.Equal(t, base+"/admin/", b.location(), "back where the browser was going")
	cookies := b.session(base)
	require.Len(t, cookies, 1)
	require.True(t, cookies[0].HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, cookies[0].SameSite)
	require.Equal(t, "/", cookies[0].Path)
	require.False(t, cookies[0].Secure, "plain HTTP")
	jsCookies, err := chromedp.Run(b.step(), chromedp.Evaluate[string](`document.cookie`))
	require.NoError(t, err)
	require.NotContains(t, jsCookies, "ferry_admin_session", "the page's scripts cannot read the session")

	// The summary: this worker, the leader, what needs a look.
	require.Equal(t, clientID, b.text("#replica-name"))
	require.Equal(t, "leader", b.text("#replica-role"))
	require.Contains(t, b.text("#answered-by"), clientID)
	require.Contains(t, b.text("#leader-name"), "ferry-leader:")
	require.Equal(t, "1", b.text("#stuck-deliveries"))
	noRoute, err := chromedp.Run(b.step(), chromedp.Evaluate[bool](`document.getElementById("stuck-messages") === null`))
	require.NoError(t, err)
	require.True(t, noRoute, "the stuck message has a route: it is not counted as one without")
	require.GreaterOrEqual(t, b.count("#jobs-running"), 1, "the sleeping job")
	require.GreaterOrEqual(t, b.count("#jobs-discarded"), 1, "the job that failed for good")
	require.Contains(t, b.text(`#summary-late li[data-schedule="stalled-export"]`), "Stalled export")
	require.NotContains(t, b.text("#summary-late"), scheduleID, "a schedule that is not late")
	keep()
	b.screenshot(filepath.Join(artifacts, "admin-summary.png"))

	// A schedule and its next run.
	b.do("open the schedules", chromedp.Click(chromedp.CSS(`nav a[href="/admin/schedules"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-schedule="`+scheduleID+`"]`)))
	name := b.text(`tr[data-schedule="` + scheduleID + `"] td.name`)
	require.Equal(t, "Nightly report", name)
	next := b.text(`tr[data-schedule="` + scheduleID + `"] td.next-run`)
	m := regexp.MustCompile(`^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC (in \d.*|now)$`).FindStringSubmatch(next)
	require.NotNil(t, m, "next run %q: a UTC time and how far off it is", next)
	nextAt, err := time.Parse(time.DateTime, m[1])
	require.NoError(t, err)
	require.WithinRange(t, nextAt, time.Now().Add(-5*time.Second), time.Now().Add(time.Hour), "next run within the hour")
	require.Zero(t, nextAt.Minute()+nextAt.Second(), "every 1h fires on the hour (UTC)")
	jobLink, err := chromedp.Run(b.step(), chromedp.AttributeValue(chromedp.CSS(`tr[data-schedule="`+tickerID+`"] a`), "href"))
	require.NoError(t, err)
	require.Regexp(t, `^/riverui/jobs/\d+$`, jobLink.Value, "the ticker's last job links to River UI")
	keep()
	b.screenshot(filepath.Join(artifacts, "admin-schedules.png"))

	// The leader and the bot.
	b.do("open the leader page", chromedp.Navigate(base+"/admin/leader"), chromedp.WaitVisible(chromedp.CSS("#holder")))
	require.Contains(t, b.text("#holder"), "ferry-leader:")
	require.Contains(t, b.text(`#terms tr[data-end="leading"]`), strconv.Itoa(p.Pid()), "the worker's term is the live one")
	keep()
	// Long names keep to one line, on a narrow screen too.
	b.do("narrow the window", chromedp.EmulateViewport(420, 900))
	b.requireOneLine(".id")
	b.do("open the summary, narrow", chromedp.Navigate(base+"/admin/"), chromedp.WaitVisible(chromedp.CSS("#summary")))
	b.requireOneLine(".id")
	b.do("widen the window", chromedp.EmulateViewport(1280, 900))
	b.do("back to the leader page", chromedp.Navigate(base+"/admin/leader"), chromedp.WaitVisible(chromedp.CSS("#holder")))
	b.screenshot(filepath.Join(artifacts, "admin-leader.png"))
	b.do("open the telegram page", chromedp.Navigate(base+"/admin/telegram"), chromedp.WaitVisible(chromedp.CSS(`tr[data-bot="desk"]`)))
	require.Contains(t, b.text(`tr[data-bot="desk"]`), "unauthorized", "the bot's last error kind")
	keep()
	b.screenshot(filepath.Join(artifacts, "admin-telegram.png"))

	// The worker itself, alive.
	b.do("open the workers page", chromedp.Click(chromedp.CSS(`nav a[href="/admin/workers"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#workers tr[data-state="alive"]`)))
	require.Contains(t, b.text(`#workers tr[data-state="alive"]`), strconv.Itoa(p.Pid()), "the worker's pid")
	keep()
	b.screenshot(filepath.Join(artifacts, "admin-workers.png"))

	// The stuck delivery: flip the receiver, click Reset, see it delivered.
	b.do("open the outbox", chromedp.Navigate(base+"/admin/outbox"),
		chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf("#reset-%d", msgID))))
	require.Contains(t, b.text(fmt.Sprintf(`tr[data-message="%d"] td.err`, msgID)), "503")
	keep()
	b.screenshot(filepath.Join(artifacts, "admin-outbox-stuck.png"))
	open.Store(true)
	b.do("click Reset", chromedp.Click(chromedp.CSS(fmt.Sprintf("#reset-%d", msgID))),
		chromedp.WaitVisible(chromedp.CSS("p.flash")))
	require.Equal(t, "Reset 1 delivery of 1 message: queued for delivery again.", b.text("p.flash"))
	deadline := time.Now().Add(stepTimeout)
	for {
		shown, err := chromedp.Run(b.step(), chromedp.Evaluate[bool](
			`!!document.querySelector('tr[data-route="billing"][data-status="delivered"]') && !!document.getElementById('no-stuck')`))
		require.NoError(t, err)
		if shown {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the outbox page does not show the message delivered after %s (delivery is %s)", stepTimeout, deliveryStatus(t, pool, msgID))
		}
		time.Sleep(200 * time.Millisecond)
		b.do("reload the outbox", chromedp.Reload())
	}
	require.Equal(t, "delivered", deliveryStatus(t, pool, msgID))
	require.EqualValues(t, 1, delivered.Load())
	keep()
	shot := filepath.Join(artifacts, "admin-outbox.png")
	b.screenshot(shot)
	t.Logf("screenshot of the outbox after the reset: %s", shot)

	// River UI, from the schedule's job link, with the session: its own
	// fetches carry the cookie.
	b.do("open the job in River UI", chromedp.Navigate(base+jobLink.Value))
	_, err = chromedp.Run(b.step(), chromedp.Poll[bool](`document.body && document.body.innerText.includes("ferry.noop")`,
		chromedp.WithPollingTimeout(stepTimeout)))
	require.NoError(t, err, "River UI shows the schedule's job")
	b.screenshot(filepath.Join(artifacts, "riverui-job.png"))

	// Sign out: the cookie is gone, and the console asks for the token.
	b.do("sign out", chromedp.Navigate(base+"/admin/"), chromedp.WaitVisible(chromedp.CSS("#logout")),
		chromedp.Click(chromedp.CSS(`#logout button`)), chromedp.WaitVisible(chromedp.CSS("#login")))
	require.Empty(t, b.session(base))
	b.do("open the console signed out", chromedp.Navigate(base+"/admin/outbox"), chromedp.WaitVisible(chromedp.CSS("#login")))
	require.Equal(t, base+"/admin/login?next=%2Fadmin%2Foutbox", b.location())

	// No secret in anything the browser was shown.
	for i, html := range pagesSeen {
		for _, s := range secrets {
			require.NotContains(t, html, s, "page %d the browser showed", i)
		}
	}
	// Nor in any page or JSON answer, nor in a refusal.
	checkNoSecrets(t, base, adminToken, secrets)
	b.close()

	require.NoError(t, p.Signal(syscall.SIGTERM))
	code, err := p.Wait(stepTimeout)
	require.NoError(t, err)
	require.Zero(t, code, "worker exit code after SIGTERM")
	for _, s := range secrets {
		require.NotContains(t, p.Stdout()+p.Stderr(), s, "the worker's log")
	}
}

// checkNoSecrets reads every admin page and JSON answer, with the token and
// without (as a script and as a browser opening a page), and requires that
// no secret appears in a body or a header.
func checkNoSecrets(t *testing.T, base, token string, secrets []string) {
	t.Helper()
	client := &http.Client{
		Timeout:       stepTimeout,
		Transport:     &http.Transport{DisableKeepAlives: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	paths := []string{
		"/admin/", "/admin/leader", "/admin/workers", "/admin/schedules", "/admin/outbox", "/admin/telegram",
		"/admin/api/summary", "/admin/api/leader", "/admin/api/workers", "/admin/api/schedules", "/admin/api/outbox", "/admin/api/telegram",
		"/metrics", "/riverui/", "/riverui/api/jobs?state=completed", "/riverui/api/jobs?state=available",
	}
	read := func(path, auth, accept string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Accept", accept)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		headers := fmt.Sprint(resp.Header)
		for _, s := range secrets {
			require.NotContains(t, string(body), s, "GET %s (%q)", path, auth)
			require.NotContains(t, headers, s, "GET %s (%q)", path, auth)
		}
		return resp, string(body)
	}
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token} {
		for _, path := range paths {
			if auth == "Bearer "+token {
				resp, body := read(path, auth, "text/html,application/json")
				require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, body)
				continue
			}
			resp, _ := read(path, auth, "application/json")
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "GET %s without the token", path)
			require.Equal(t, `Bearer realm="ferry admin"`, resp.Header.Get("WWW-Authenticate"))
			resp, _ = read(path, auth, "text/html")
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a browser opening %s without a session", path)
			require.True(t, strings.HasPrefix(resp.Header.Get("Location"), "/admin/login?next="), resp.Header.Get("Location"))
		}
	}
	resp, _ := read("/admin/login", "", "text/html")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// /readyz answers probes without the token (its reason only with it).
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + token} {
		resp, body := read("/readyz", auth, "text/plain")
		require.Equal(t, http.StatusOK, resp.StatusCode, "GET /readyz (%q): %s", auth, body)
	}
}

func jobState(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var state string
	if err := pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&state); err != nil {
		return "absent"
	}
	return state
}

func deliveryStatus(t *testing.T, pool *pgxpool.Pool, msgID int64) string {
	t.Helper()
	var status string
	err := pool.QueryRow(context.Background(),
		`SELECT status FROM ferry_outbox_delivery WHERE message_id = $1 AND route = 'billing'`, msgID).Scan(&status)
	if err != nil {
		return "absent"
	}
	return status
}

// waitFor polls ok every pollEvery until it holds, for at most stepTimeout.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(stepTimeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", stepTimeout, what)
		}
		time.Sleep(pollEvery)
	}
}

// browser is one headless Chromium with one tab.
type browser struct {
	t         *testing.T
	ctx       context.Context
	cancel    func()
	closeOnce sync.Once
}

// newBrowser starts Chromium with a fresh profile.
func newBrowser(t *testing.T, chrome string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox cannot start
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium-profile")),
		chromedp.WindowSize(1280, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b := &browser{t: t, ctx: ctx}
	b.cancel = func() { cancelTab(); cancelAlloc() }
	t.Cleanup(b.close)
	if err := chromedp.Do(ctx); err != nil { // starts the browser, bound to ctx
		t.Fatalf("browsertest: start chromium %s: %v", chrome, err)
	}
	return b
}

// location is the tab's URL.
func (b *browser) location() string {
	b.t.Helper()
	loc, err := chromedp.Run(b.step(), chromedp.Location())
	if err != nil {
		b.t.Fatalf("browser: location: %v", err)
	}
	return loc
}

// session returns the browser's session cookies for base.
func (b *browser) session(base string) []*network.Cookie {
	b.t.Helper()
	res, err := chromedp.Call(b.step(), network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/admin/"}})
	if err != nil {
		b.t.Fatalf("browser: read cookies: %v", err)
	}
	var out []*network.Cookie
	for _, c := range res.Cookies {
		if c.Name == "ferry_admin_session" {
			out = append(out, c)
		}
	}
	return out
}

// count reads an element's text as a number.
func (b *browser) count(css string) int {
	b.t.Helper()
	n, err := strconv.Atoi(b.text(css))
	if err != nil {
		b.t.Fatalf("browser: %s is not a count: %v", css, err)
	}
	return n
}

// requireOneLine requires every element matching css to be laid out on one
// line: its text's boxes all share one top.
func (b *browser) requireOneLine(css string) {
	b.t.Helper()
	broken, err := chromedp.Run(b.step(), chromedp.Evaluate[[]string](`[...document.querySelectorAll(`+strconv.Quote(css)+`)].filter(e => {
		const r = document.createRange(); r.selectNodeContents(e);
		return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size > 1;
	}).map(e => e.textContent)`))
	if err != nil {
		b.t.Fatalf("browser: measure %s: %v", css, err)
	}
	n, err := chromedp.Run(b.step(), chromedp.Evaluate[int](`document.querySelectorAll(`+strconv.Quote(css)+`).length`))
	if err != nil {
		b.t.Fatalf("browser: count %s: %v", css, err)
	}
	require.Positive(b.t, n, "elements %s", css)
	require.Empty(b.t, broken, "names wrapped over two lines")
}

// step is a context for one browser step.
func (b *browser) step() context.Context {
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	b.t.Cleanup(cancel)
	return ctx
}

func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.step(), actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// text is the visible text of the first node that matches css, trimmed.
// The node is found and read in one evaluation in the page, which its own
// scripts cannot interleave: a live page swaps its content, and a node found
// by one protocol call could be gone by the next, which reads it ("No node
// with given id found"). It waits for the node to be there.
func (b *browser) text(css string) string {
	b.t.Helper()
	q, err := json.Marshal(css)
	if err != nil {
		b.t.Fatal(err)
	}
	s, err := chromedp.Run(b.step(), chromedp.Poll[[]string](
		`(() => { const e = document.querySelector(`+string(q)+`); return e === null ? null : [e.innerText]; })()`,
		chromedp.WithPollingInterval(pollEvery)))
	if err != nil || len(s) != 1 {
		b.t.Fatalf("browser: read %s: %v", css, err)
	}
	return strings.TrimSpace(s[0])
}

// screenshot saves a full-page PNG.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	png, err := chromedp.Run(b.step(), chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatalf("browser: save screenshot: %v", err)
	}
}

// close stops Chromium; it is safe to call twice.
func (b *browser) close() { b.closeOnce.Do(b.cancel) }
