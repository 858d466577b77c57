package redact

import "regexp"

// postgresMask is what Postgres puts in place of a password. It is pgx's
// own marker (pgconn redacts with it too), so a message scrubbed twice, or
// by both, reads the same.
const postgresMask = "xxxxx"

var (
	// The password runs to the last '@' of the authority, so a raw '@' in
	// it (which a valid URL percent-encodes) is hidden too.
	urlPassRE = regexp.MustCompile(`(?i)(postgres(?:ql)?://[^:/@\s]*:)[^\s/?#]*@`)
	// A keyword/value password: at the start, or after any character but a
	// letter, digit, '_' (sslpassword is its own keyword) or a URL's '?' and
	// '&' (qPassRE's). An unquoted value runs to the next whitespace.
	kvPassRE = regexp.MustCompile(`(?i)(^|[^\w?&])((?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	qPassRE  = regexp.MustCompile(`(?i)([?&](?:ssl)?password=)[^&\s]*`)
)

// Postgres replaces every password in s, which may be a connection string
// or a whole error message quoting one, with xxxxx. See the package
// documentation for the forms it knows.
func Postgres(s string) string {
	s = urlPassRE.ReplaceAllString(s, "${1}"+postgresMask+"@")
	s = qPassRE.ReplaceAllString(s, "${1}"+postgresMask)
	return kvPassRE.ReplaceAllString(s, "${1}${2}"+postgresMask)
}
