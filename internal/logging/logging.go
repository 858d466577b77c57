// Package logging builds ferry's *slog.Logger: tint (coloured, human) on a
// terminal, JSON otherwise. It is the one place that choice is made.
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
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "", FormatAuto:
		if tty {
			return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly})), nil
		}
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	case FormatText:
		return slog.New(tint.NewHandler(w, &tint.Options{Level: lvl, TimeFormat: time.DateTime, NoColor: !tty})), nil
	case FormatJSON:
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
	}
	return nil, fmt.Errorf("log format %q is not one of auto, text, json", format)
}

// AtLeast returns a logger that drops records below min, whatever l's own
// level: ferry's debug lines are worth having, River's are a firehose.
func AtLeast(l *slog.Logger, min slog.Level) *slog.Logger {
	return slog.New(&minLevel{Handler: l.Handler(), min: min})
}

type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h *minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h *minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return &minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h *minLevel) WithGroup(name string) slog.Handler {
	return &minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}
