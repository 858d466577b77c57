// Package admin serves ferry's operator HTTP surface on FERRY_ADMIN_ADDR:
//
//	/healthz            liveness (never needs the token)
//	/readyz             database reachable and schema at head
//	/metrics            Prometheus
//	/riverui/           River UI (riverqueue.com/riverui), when Config.RiverUI is set
//	/admin/             ferry's own pages: leader, workers, schedules, outbox, telegram
//	/admin/api/NAME     the same data as JSON: leader, workers, schedules, outbox, telegram
//
// The pages and their JSON come from a Console, which the root package
// implements over the database. They are rendered on the server with
// html/template from templates embedded in the binary: no JavaScript, no
// front-end build, one small inline style block allowed by its hash in the
// Content-Security-Policy.
//
// # Authentication
//
// FERRY_ADMIN_TOKEN (Config.Token) protects everything but /healthz, given as
// a bearer token (Authorization: Bearer …) or as the password of HTTP basic
// auth (any user name), so a browser can sign in: a 401 carries
// WWW-Authenticate: Basic, and the browser prompts. A request without the
// token gets 401 before any handler runs.
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
// /admin/outbox/reset) also carry a CSRF token, HMAC-SHA256(key, "csrf") with
// a random key made when the server starts, compared in constant time: a
// request without it is refused even when its headers look same-origin. A
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
