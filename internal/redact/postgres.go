package redact

import "regexp"

// postgresMask is what Postgres puts in place of a password. It is pgx's
// own marker (pgconn redacts with it too), so a message scrubbed twice, or
// by both, reads the same.
const postgresMask = "xxxxx"

var (
	urlPassRE = regexp.MustCompile(`(?i)(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@`)
	kvPassRE  = regexp.MustCompile(`(?i)(^|\s)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	qPassRE   = regexp.MustCompile(`(?i)([?&]password=)[^&\s]*`)
)

// Postgres replaces every password in s, which may be a connection string
// or a whole error message quoting one, with xxxxx. See the package
// documentation for the forms it knows.
func Postgres(s string) string {
	s = urlPassRE.ReplaceAllString(s, "${1}"+postgresMask+"@")
	s = kvPassRE.ReplaceAllString(s, "${1}${2}"+postgresMask)
	return qPassRE.ReplaceAllString(s, "${1}"+postgresMask)
}
