// Package admin serves ferry's operator HTTP surface on FERRY_ADMIN_ADDR:
//
//	/healthz            liveness (never needs the token)
//	/readyz             database reachable and schema at head (its reason only with the token)
//	/metrics            Prometheus
//	/riverui/           River UI (riverqueue.com/riverui), when Config.RiverUI is set
//	/admin/             ferry's own pages: the summary, leader, workers, schedules, outbox, telegram
//	/admin/api/NAME     the same data as JSON: summary, leader, workers, schedules, outbox, telegram
//	/admin/events       server-sent events: the pages' live updates (Config.Events)
//	/admin/live.js      the script that applies them
//	/admin/login        the sign-in page (with a token); POST /admin/logout signs out
//
// The pages and their JSON come from a Console; the capability's
// (NewCapability) reads the server's database and the other capabilities'
// state (Sources). They are rendered on the server with
// html/template from templates embedded in the binary: no front-end build,
// one small inline style block allowed by its hash in the
// Content-Security-Policy, and one small script file (/admin/live.js,
// allowed as same-origin) that keeps the page current.
//
// # Live updates
//
// With Config.Events (the process's broadcast Broker), each page listens
// to /admin/events, a stream of server-sent events fed by the broadcast
// channel EventsChannel ("ferry.admin": the broadcast capability,
// internal/broadcastcap, announces there a leader acquired or released,
// and, from the leader's watch every second, stuck outbox deliveries and
// named locks that changed). On each event, and on each gap, the script
// fetches the page again and swaps its <main>: the page changes
// without a reload. Without Events, /admin/events answers 204 and the
// pages stay as they were served.
//
// # The summary
//
// /admin/ opens on what an operator asks first (Summary): the replica that
// answered (its worker name, host, pid and role in the election), the
// leader, stuck outbox deliveries, running jobs, failed ones (waiting to
// retry, and discarded within DiscardedWindow), and the schedules more than
// LateAfter past their next run. Behind a load balancer each answer may come
// from another replica: every page names the one that answered, and so does
// the Ferry-Replica header of every signed-in answer. The leader page shows
// how each term ended (TermView): resigned, abandoned, superseded (it never
// resigned, and a successor took over), crashed (it never resigned, and no
// successor has the lock yet), or leading.
//
// # Authentication
//
// FERRY_ADMIN_TOKEN (Config.Token) protects everything but /healthz, /readyz
// and the sign-in page. /readyz answers any request, since a probe such as a
// kubelet's cannot carry a secret, but tells why it is not ready only to a
// request with the token or a session; the others get "not ready".
//
// A browser that opens a page without a session is sent to /admin/login,
// which takes the token once, compares it in constant time, and sets a
// session cookie (SessionCookie): HttpOnly, SameSite=Strict, Path=/, Secure
// when the browser reached the server over TLS (a TLS connection, or an
// https Origin on the sign-in form behind a proxy that terminates TLS).
// River UI works after that: its own requests carry the cookie. (A URL with
// basic-auth credentials in it does not: browsers refuse the fetches of a
// page loaded that way.) POST /admin/logout clears the cookie.
//
// The session is stateless: "v1.<expiry>.<HMAC-SHA256 of both>", with a key
// derived from the token (HKDF-SHA256). So every replica with the same token
// accepts a session another one made, behind a load balancer with no sticky
// sessions and no shared store, a restart keeps it, and a new token ends every
// session. The price of statelessness: signing out clears this browser's
// cookie but cannot revoke a copy of it before it expires (SessionTTL); change
// the token for that.
//
// Scripts send the token on every request instead, as a bearer token
// (Authorization: Bearer …) or as the password of HTTP basic auth (any user
// name). A request with neither a session nor the token gets 401 (with
// WWW-Authenticate: Bearer, so a browser does not prompt), or, when a browser
// opens a page, a redirect to the sign-in page. Nothing runs before that.
//
// Without a token the server refuses to listen anywhere but a loopback
// address (ErrExposedWithoutToken), and it answers only requests whose Host
// is a loopback address or localhost, so a web page cannot reach it through
// DNS rebinding.
//
// # State-changing requests
//
// GET never changes anything. Every other method is refused (403) when the
// browser says it comes from another origin, as net/http's
// CrossOriginProtection judges it: a Sec-Fetch-Site other than same-origin
// or none, or without that header an Origin whose host is not the request's
// Host. A browser that sends neither header is judged by its Referer the
// same way. This covers River UI's own API too. ferry's forms (POST
// /admin/outbox/reset) also carry a CSRF token, HMAC-SHA256(key, "csrf"),
// compared in constant time: a request without it is refused even when its
// headers look same-origin. With a token the key is derived from it (HKDF),
// so a form one replica rendered is accepted by any replica behind the same
// load balancer; without one it is random, made when the server starts. A
// reverse proxy in front of the server must pass the Host header through, or
// the browser's Origin will not match it.
//
// # What is never shown
//
// The admin token, route secrets and bot tokens are never rendered. Errors
// from the Console are logged and answered with a generic message, never with
// their text (a driver error may carry a URL). What the pages show of an
// outbox delivery's last error was scrubbed of the route's URL credentials and
// secret when it was recorded (package outbox). The Telegram page shows a
// bot's last error by its kind; its JSON also carries the message, which the
// poller scrubs of the bot token.
package admin
