// Package logattr holds how ferry writes log attributes, shared by the
// worker's handlers (internal/logging) and the tests' recorder
// (internal/base/logtest), which must write what production writes.
package logattr

import "log/slog"

// Replace is the slog.HandlerOptions.ReplaceAttr of every handler ferry
// makes: it writes a time.Duration as a Go duration string ("1m0s"), where
// slog's JSON handler would write integer nanoseconds.
func Replace(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
