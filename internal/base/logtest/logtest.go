// Package logtest records what a component logs, for its tests to read: a
// Recorder is an io.Writer that keeps JSON log records in memory, safe for
// the goroutines of the component under test, and finds records by message.
// Logged matches one JSON log line by message and attributes, for tests that
// wait for a line of a real process (proctest's WaitForLineFunc).
package logtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logattr"
)

// Recorder keeps log output in memory. Its zero value is ready; it is safe
// for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer, for a handler of the test's own making.
func (r *Recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

// String returns everything written so far.
func (r *Recorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.String()
}

// Logger returns a logger that writes JSON records at debug level and above
// to r, shaped as production's are (logattr.Replace: durations as Go
// duration strings).
func (r *Recorder) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(r, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: logattr.Replace}))
}

// All returns every record whose message is msg, in the order written.
func (r *Recorder) All(msg string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(r.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// Find returns the one record whose message is msg, failing tb if there is
// not exactly one.
func (r *Recorder) Find(tb testing.TB, msg string) map[string]any {
	tb.Helper()
	recs := r.All(msg)
	require.Len(tb, recs, 1, "records %q", msg)
	return recs[0]
}

// Logged returns a matcher of JSON log lines (as slog's JSON handler writes
// them) whose msg is msg and whose attributes include attrs, given as key,
// value pairs like slog's. Values are compared in their printed form, so an
// int64 id matches the JSON number, and true matches true. A line that is
// not a JSON object does not match.
func Logged(msg string, attrs ...any) func(line string) bool {
	return func(line string) bool {
		dec := json.NewDecoder(strings.NewReader(line))
		dec.UseNumber()
		var rec map[string]any
		if dec.Decode(&rec) != nil || rec["msg"] != msg {
			return false
		}
		for i := 0; i+1 < len(attrs); i += 2 {
			if fmt.Sprint(rec[fmt.Sprint(attrs[i])]) != fmt.Sprint(attrs[i+1]) {
				return false
			}
		}
		return true
	}
}
