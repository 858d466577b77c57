package fleet

import (
	"encoding/json"
	"strings"
	"time"
)

// Record is one JSON log record, as slog's JSON handler writes it.
type Record struct {
	// Proc is the process that wrote it, when a Fleet found it.
	Proc *Proc
	// Time, Level and Msg are slog's time, level and msg.
	Time  time.Time
	Level string
	Msg   string
	// Attrs is the whole record, the three above included; numbers are
	// json.Number.
	Attrs map[string]any
}

// ParseRecord reads line as a JSON log record. It reports false for a line
// that is not a JSON object or has no msg.
func ParseRecord(line string) (Record, bool) {
	if !strings.HasPrefix(line, "{") {
		return Record{}, false
	}
	dec := json.NewDecoder(strings.NewReader(line))
	dec.UseNumber()
	var attrs map[string]any
	if dec.Decode(&attrs) != nil {
		return Record{}, false
	}
	msg, ok := attrs["msg"].(string)
	if !ok {
		return Record{}, false
	}
	r := Record{Msg: msg, Attrs: attrs}
	r.Level, _ = attrs["level"].(string)
	if ts, ok := attrs["time"].(string); ok {
		r.Time, _ = time.Parse(time.RFC3339Nano, ts)
	}
	return r, true
}
