// Package browsertest drives the admin console with a real browser: a
// `worker` built from this module runs against a database of its own with
// FERRY_ADMIN_TOKEN set, and headless Chromium (Debian's chromium package,
// driven through the DevTools protocol by github.com/chromedp/chromedp) is
// sent to the sign-in page, refused with a wrong token and signed in with
// the right one (the session cookie HttpOnly and SameSite=Strict, out of
// the page's scripts' reach). It reads the summary (this worker as the
// leader, a stuck delivery, a running and a discarded job, a late
// schedule), a schedule and its next run, the leader's terms, checks on a
// narrow screen that long names keep to one line, finds the worker alive on
// the workers page, resets a stuck outbox delivery by clicking its button,
// waits until the page shows it delivered, opens a job in River UI (whose
// own requests carry the session), and signs out. Full-page screenshots are
// kept: in the directory named by FERRY_TEST_ARTIFACTS when it is set (CI
// sets it), else in the test's temporary directory; the test logs the
// outbox's path.
//
// The test also reads every page and JSON answer and checks that no secret
// given to the worker (the admin token, a route's secret and URL
// credential, a bot token) appears in any of them.
//
// Chromium must be installed: `go tool task browser` installs it, and `go
// tool task test` runs that first. Without it the test fails, naming that
// command; it never skips. The package has no code besides its test.
package browsertest
