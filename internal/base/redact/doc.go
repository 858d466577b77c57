// Package redact scrubs secrets from what ferry prints: log lines, error
// messages, statuses and the last errors River stores. Code that quotes a
// connection string or a URL, or a text that may echo a token, goes
// through it, so what is hidden, and how it reads once hidden, is decided
// here once. (The outbox scrubs a receiver's answer of the route's secret
// and signature with a replacer of its own, built from the parts of one
// delivery; it marks them with Placeholder too.)
//
// Each function says below what it scrubs and, as plainly, what it leaves:
// a caller that needs more must not assume it.
//
// # Postgres connection strings
//
// Postgres(s) takes a connection string or any text quoting one (a pgx error
// message, a config error) and replaces each password with xxxxx, pgx's own
// marker. It knows three forms, case-insensitively:
//
//   - URL userinfo: postgres://user:secret@host or postgresql://… becomes
//     postgres://user:xxxxx@host. The user name is kept; a URL with no
//     password is unchanged.
//   - Keyword/value: password=secret, password = 'a quoted secret' (with
//     backslash escapes), at the start of s or after whitespace, becomes
//     password=xxxxx. An unquoted value runs to the next whitespace, so
//     punctuation quoting it (a closing backquote) goes with it.
//   - Query parameter: ?password=secret or &password=secret, up to the next
//     & or whitespace, in any URL.
//
// The URL form's password runs to the last '@' of the authority, so a raw
// '@' in it is hidden too (postgres://u:p@ss@h). sslpassword is scrubbed in
// both the keyword/value and the query form, and a keyword/value password
// after punctuation ("(password=x") too. It does not scrub: a URL password
// holding whitespace, '/', '?' or '#', which a valid URL percent-encodes;
// other secret parameters (sslkey, passfile name files, not secrets); the
// host, port, user and database names.
//
// PostgresConnect(err) is how a failed connection is said: pgconn's error
// names the user and database, then each attempt (an address, with TLS or
// without) with the whole chain of its cause, each layer repeating the one
// below. It keeps the innermost cause of each attempt, each distinct one
// once ("connection refused"), scrubbed as Postgres scrubs; the caller
// names the host. Any other error is its message, scrubbed.
//
// # URLs
//
// URL(raw) is how a URL is quoted: without userinfo and fragment, with a
// non-empty query string replaced by "…" (https://u:p@h/x?token=t#f is
// https://h/x?…), and "(unparsable url)" for a raw url.Parse rejects. It
// does not scrub a secret in the host or the path (a Bot API URL carries
// the token in its path: use a Scrubber). An opaque URL, one without "//"
// after its scheme, which url.Parse reads as scheme:opaque ("user:pw@host"
// has the scheme "user"), is quoted by its scheme alone: "user:…".
//
// URLError(err) strips the first *url.Error from err's chain: net/http
// returns one for every failed request, and its message repeats the full
// URL. The result is the *url.Error's cause (what wrapped it is dropped
// too); the caller names the request with URL. The cause's own message is
// not scrubbed (a dial error names host and port, which are not secret).
//
// # Secrets
//
// Secret(secret, prefixes...) returns a Scrubber that replaces secret with
// Placeholder, "[redacted]", in the three forms a URL or an echo of one
// carries: as is, path-escaped and query-escaped. Each prefix followed by a
// form is matched first and kept: with "bot", the Bot API path segment
// bot<token> reads bot[redacted]. Scrubber.Err does the same to an error's
// message, returning a new error only when something was scrubbed; that
// error unwraps to context.Canceled or context.DeadlineExceeded if err did,
// and to nothing else, since err's chain holds the secret. An empty secret
// scrubs nothing.
//
// A Scrubber does not find the secret in other encodings (base64, JSON or
// HTML escapes, another case), cut in two (a truncated snippet), or split
// across calls: scrub before truncating, and the whole text at once.
package redact
