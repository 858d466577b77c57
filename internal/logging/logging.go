// Package logging builds ferry's *slog.Logger: tint (coloured, human) on a
// terminal, JSON otherwise. It is the one place that choice is made, and
// the one place log records are shaped:
//
//   - Durations are written as Go duration strings ("1m0s", "250ms") in
//     every format, never as integer nanoseconds (logattr.Replace).
//   - River's own records go through River, which keeps River's chatter at
//     debug level and drops the lines that repeat what ferry logs itself.
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"golang.org/x/term"

	"github.com/ferryq/ferry/internal/base/logattr"
)

// Formats accepted by New.
const (
	FormatAuto = "auto" // text on a terminal, JSON otherwise
	FormatText = "text"
	FormatJSON = "json"
)

// ParseLevel reads debug, info, warn or error.
func ParseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.TrimSpace(s))); err != nil {
		return 0, fmt.Errorf("log level %q is not one of debug, info, warn, error", s)
	}
	return l, nil
}

// New returns a logger writing to w in format (auto, text or json) at level.
func New(w io.Writer, format, level string) (*slog.Logger, error) {
	lvl, err := ParseLevel(level)
	if err != nil {
		return nil, err
	}
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	text := func(timeFormat string) *slog.Logger {
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: timeFormat, NoColor: !tty, ReplaceAttr: logattr.Replace}))
	}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", FormatAuto:
		if tty {
			return text(time.TimeOnly), nil
		}
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: logattr.Replace})), nil
	case FormatText:
		return text(time.DateTime), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: logattr.Replace})), nil
	}
	return nil, fmt.Errorf("log format %q is not one of auto, text, json", format)
}

// River returns the logger to give River (river.Config.Logger) and River
// UI: River's debug records are dropped (a firehose), its info records
// are written at debug level ("Producer job counts" every few seconds is
// not news), its warnings and errors as they are.
//
// River's lines about a job attempt's end are dropped at every level:
// ferry's worker middleware logs each attempt once, with more fields
// ("job: failed" at warn, "job: interrupted" at info), and River's error
// line "panic recovery; possible bug with Worker" already reports a panic.
func River(l *slog.Logger) *slog.Logger {
	return slog.New(&riverHandler{next: l.Handler()})
}

// riverDuplicates end the messages of River's info records that repeat a
// line ferry writes itself. River prefixes them with the service's name
// ("jobexecutor.JobExecutor: Job errored").
var riverDuplicates = []string{
	": Job errored",
	": Job errored; retrying",
	": Job panicked",
	": Job stopped due to client shutdown; retrying",
}

type riverHandler struct {
	next slog.Handler
}

// Enabled reports whether a record of River's at l may be written: River's
// info records are written at debug level.
func (h *riverHandler) Enabled(ctx context.Context, l slog.Level) bool {
	switch {
	case l < slog.LevelInfo:
		return false
	case l < slog.LevelWarn:
		return h.next.Enabled(ctx, slog.LevelDebug)
	}
	return h.next.Enabled(ctx, l)
}

func (h *riverHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		for _, suffix := range riverDuplicates {
			if strings.HasSuffix(r.Message, suffix) {
				return nil
			}
		}
		r.Level = slog.LevelDebug
	}
	return h.next.Handle(ctx, r)
}

func (h *riverHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &riverHandler{next: h.next.WithAttrs(as)}
}

func (h *riverHandler) WithGroup(name string) slog.Handler {
	return &riverHandler{next: h.next.WithGroup(name)}
}
