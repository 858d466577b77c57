// Package dburl edits URL-form Postgres connection strings. Redacting them
// is package redact's (redact.Postgres).
package dburl

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/ferryq/ferry/internal/redact"
)

// WithDatabase returns the URL-form connection string u with its database
// name replaced by db, keeping user, host and query options.
func WithDatabase(u, db string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil || (parsed.Scheme != "postgres" && parsed.Scheme != "postgresql") {
		return "", fmt.Errorf("want a postgres:// URL, got %q", redact.Postgres(u))
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
