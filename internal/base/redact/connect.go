package redact

import (
	"errors"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// PostgresConnect says why a connection to Postgres failed, once: the
// innermost cause of each attempt (connection refused, an i/o timeout, a
// name that does not resolve, the server's FATAL), each distinct one once,
// joined by "; ", with passwords scrubbed as Postgres does. An error that is
// not a *pgconn.ConnectError is err's message, scrubbed.
func PostgresConnect(err error) string {
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return Postgres(err.Error())
	}
	var reasons []string
	var walk func(error)
	walk = func(e error) {
		for {
			switch u := e.(type) {
			case interface{ Unwrap() []error }: // one error per attempt
				for _, e := range u.Unwrap() {
					walk(e)
				}
				return
			case interface{ Unwrap() error }:
				if next := u.Unwrap(); next != nil {
					e = next
					continue
				}
			}
			if !slices.Contains(reasons, e.Error()) {
				reasons = append(reasons, e.Error())
			}
			return
		}
	}
	walk(ce.Unwrap())
	return Postgres(strings.Join(reasons, "; "))
}
