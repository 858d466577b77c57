// Package dburl edits and redacts Postgres connection strings (URL and
// keyword/value forms) so that a password never reaches a log line or an
// error.
package dburl

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

var (
	urlPassRE = regexp.MustCompile(`(?i)(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@`)
	kvPassRE  = regexp.MustCompile(`(?i)(^|\s)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	qPassRE   = regexp.MustCompile(`(?i)([?&]password=)[^&\s]*`)
)

// Redact replaces every password in s (which may be a whole error message)
// with xxxxx.
func Redact(s string) string {
	s = urlPassRE.ReplaceAllString(s, "${1}xxxxx@")
	s = kvPassRE.ReplaceAllString(s, "${1}${2}xxxxx")
	return qPassRE.ReplaceAllString(s, "${1}xxxxx")
}

// WithDatabase returns the URL-form connection string u with its database
// name replaced by db, keeping user, host and query options.
func WithDatabase(u, db string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", fmt.Errorf("want a postgres:// URL, got %q", Redact(u))
	}
	parsed.Path = "/" + db
	parsed.RawPath = ""
	return parsed.String(), nil
}

// Database returns the database name of a URL-form connection string, or ""
// when it names none.
func Database(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(parsed.Path, "/")
}
