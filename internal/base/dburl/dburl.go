// Package dburl edits URL-form Postgres connection strings. Redacting them
// is package redact's (redact.Postgres).
package dburl

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferryq/ferry/internal/base/redact"
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

// WithSearchPath returns the connection string u (URL or keyword/value
// form) with the session parameter search_path set to schema, so that
// every session opened from it finds that schema's tables unqualified. A
// u that sets another search_path is an error; schema "" returns u.
func WithSearchPath(u, schema string) (string, error) {
	if schema == "" {
		return u, nil
	}
	cfg, err := pgconn.ParseConfig(u)
	if err != nil {
		return "", fmt.Errorf("database URL: %s", redact.Postgres(err.Error()))
	}
	if sp, ok := cfg.RuntimeParams["search_path"]; ok {
		if sp == schema {
			return u, nil
		}
		return "", fmt.Errorf("database URL sets search_path %q, not the schema %q", sp, schema)
	}
	switch {
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		return u + sep + "search_path=" + url.QueryEscape(schema), nil
	default:
		return u + " search_path=" + schema, nil
	}
}
