package ferrycli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// bulkLine is one line of the input.
type bulkLine struct {
	Kind        string          `json:"kind"`
	Args        json.RawMessage `json:"args"`
	Queue       string          `json:"queue"`
	Priority    *int            `json:"priority"`
	ScheduledAt *string         `json:"scheduled_at"`
	MaxAttempts *int            `json:"max_attempts"`
	UniqueKey   *string         `json:"unique_key"`
	Tags        []string        `json:"tags"`
	Debounce    *bulkDebounce   `json:"debounce"`
}

// bulkDebounce is a line's debounce (jobs.WithDebounce).
type bulkDebounce struct {
	Key     string `json:"key"`
	Window  string `json:"window"`
	MaxWait string `json:"max_wait"`
}

// parsedLine is a valid line: River's insert params and its unique key,
// and, once its block is encoded (a line without a unique key), its row for
// COPY.
type parsedLine struct {
	params    river.InsertManyParams
	uniqueKey string // "" when none
	debounced bool   // uniqueKey is the line's debounce key
	size      int    // the line's length
	row       jobs.CopyRow
}

// scanLines calls fn with each non-blank line and its number (from 1).
func scanLines(r io.Reader, fn func(n int, line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), bulkMaxLine)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := fn(n, line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return &lineError{line: n + 1, err: fmt.Errorf("longer than %d bytes (args are at most %d)", bulkMaxLine, jobs.MaxArgsBytes)}
		}
		return usageErrorf("read input: %v", err)
	}
	return nil
}

// lineError is an invalid line.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }

// parse checks one line and turns it into insert params. Bad input is a
// *lineError; any other error (the database) is returned as is.
func (b *bulk) parse(ctx context.Context, n int, line []byte) (parsedLine, error) {
	bad := func(format string, args ...any) (parsedLine, error) {
		return parsedLine{}, &lineError{line: n, err: fmt.Errorf(format, args...)}
	}
	var l bulkLine
	if err := decodeLine(line, &l); err != nil {
		return bad("%s", describeLineError(err))
	}
	if l.Kind == "" {
		return bad("kind is missing")
	}
	k, err := b.kind(ctx, l.Kind)
	if err != nil {
		return parsedLine{}, err
	}
	if k == nil {
		return bad("unknown job kind %q: not built in and no worker has registered it", l.Kind)
	}

	if len(l.Args) == 0 {
		l.Args = json.RawMessage("{}")
	}
	var args jobs.RawArgs
	if k.emptyArgs != nil && isEmptyObject(l.Args) {
		args = *k.emptyArgs
	} else if args, err = jobs.ParseRaw(l.Kind, l.Args); err != nil {
		// An *ArgsError names the args; the kind's own validation does not.
		if _, ok := errors.AsType[*jobs.ArgsError](err); ok {
			return bad("%v", err)
		}
		return bad("args: %v", err)
	}

	if l.Queue == "" && l.Priority == nil && l.ScheduledAt == nil && l.MaxAttempts == nil && l.Tags == nil && l.UniqueKey == nil && l.Debounce == nil {
		// The common line, kind and args only, shares its kind's options
		// (River only reads them).
		return parsedLine{params: river.InsertManyParams{Args: args, InsertOpts: k.opts}, size: len(line)}, nil
	}
	opts := &river.InsertOpts{Queue: k.known.Queue, Priority: 1}
	if l.Queue != "" {
		if err := jobs.ValidateQueueName(l.Queue); err != nil {
			return bad("%v", err)
		}
		opts.Queue = l.Queue
	}
	if l.Priority != nil {
		if *l.Priority < 1 || *l.Priority > 4 {
			return bad("priority %d: must be 1 (first) to 4 (last)", *l.Priority)
		}
		opts.Priority = *l.Priority
	}
	if l.ScheduledAt != nil {
		t, err := time.Parse(time.RFC3339, *l.ScheduledAt)
		if err != nil {
			return bad("scheduled_at %q: not an RFC 3339 time like 2026-12-01T06:00:00Z", *l.ScheduledAt)
		}
		opts.ScheduledAt = t
	}
	if l.MaxAttempts != nil {
		if *l.MaxAttempts < 1 || *l.MaxAttempts > 32767 {
			return bad("max_attempts %d: must be 1 to 32767", *l.MaxAttempts)
		}
		opts.MaxAttempts = *l.MaxAttempts
	}
	for _, tag := range l.Tags {
		if !jobs.ValidTag(tag) {
			return bad("tags: %q: tags are 3 to 255 letters, digits, _ or -, starting and ending with a letter or digit", tag)
		}
	}
	opts.Tags = l.Tags
	var key string
	if l.UniqueKey != nil {
		if key = *l.UniqueKey; strings.TrimSpace(key) == "" {
			return bad("unique_key is empty")
		}
		opts = jobs.WithUniqueKey(opts, key)
	}
	if d := l.Debounce; d != nil {
		switch {
		case l.UniqueKey != nil:
			return bad("debounce and unique_key: give one or the other")
		case l.ScheduledAt != nil:
			return bad("debounce sets when the job runs: drop scheduled_at")
		}
		window, err := time.ParseDuration(d.Window)
		if err != nil {
			return bad("debounce window %q: not a duration like 30s or 5m", d.Window)
		}
		var maxWait time.Duration
		if d.MaxWait != "" {
			if maxWait, err = time.ParseDuration(d.MaxWait); err != nil {
				return bad("debounce max_wait %q: not a duration like 30s or 5m", d.MaxWait)
			}
		}
		if err := jobs.CheckDebounce(d.Key, window, maxWait); err != nil {
			return bad("%s", strings.TrimPrefix(err.Error(), "jobs: "))
		}
		opts = jobs.WithDebounce(opts, d.Key, window, maxWait)
		return parsedLine{params: river.InsertManyParams{Args: args, InsertOpts: opts}, uniqueKey: d.Key, debounced: true, size: len(line)}, nil
	}
	return parsedLine{params: river.InsertManyParams{Args: args, InsertOpts: opts}, uniqueKey: key, size: len(line)}, nil
}

// decodeLine decodes one line into l, refusing unknown fields with an
// *unknownFieldError. The fast path is json.Unmarshal (a json.Decoder
// costs twice the time and three times the garbage); when the line has more
// top-level keys than l has fields set (an unknown field, or just a null or
// a repeated key), its keys are read one by one.
func decodeLine(line []byte, l *bulkLine) error {
	if err := json.Unmarshal(line, l); err != nil {
		return err
	}
	if topLevelKeys(line) == l.fieldsSet() {
		return nil
	}
	return unknownField(line)
}

// bulkFields are the JSON names of bulkLine's fields, in order.
var bulkFields = func() []string {
	t := reflect.TypeFor[bulkLine]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return names
}()

// unknownFieldError is a line's key that names no field.
type unknownFieldError struct{ key string }

func (e *unknownFieldError) Error() string {
	return fmt.Sprintf("unknown field %q (fields: %s)", e.key, strings.Join(bulkFields, ", "))
}

// unknownField returns an *unknownFieldError for the first top-level key
// of the JSON object line that names none of bulkFields, matched as
// encoding/json matches them (case-insensitively), or nil if every key
// does.
func unknownField(line []byte) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil { // {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if !slices.ContainsFunc(bulkFields, func(f string) bool { return strings.EqualFold(f, key) }) {
			return &unknownFieldError{key: key}
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return err
		}
	}
	return nil
}

// fieldsSet counts the fields of l that a line set.
func (l *bulkLine) fieldsSet() int {
	n := 0
	for _, set := range []bool{l.Kind != "", l.Args != nil, l.Queue != "", l.Priority != nil,
		l.ScheduledAt != nil, l.MaxAttempts != nil, l.UniqueKey != nil, l.Tags != nil, l.Debounce != nil} {
		if set {
			n++
		}
	}
	return n
}

// topLevelKeys counts the keys of the outermost object of b, which is valid
// JSON.
func topLevelKeys(b []byte) int {
	var (
		depth, n    int
		inStr, escd bool
	)
	for _, c := range b {
		if inStr {
			switch {
			case escd:
				escd = false
			case c == '\\':
				escd = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
		case ':':
			if depth == 1 {
				n++
			}
		}
	}
	return n
}

func isEmptyObject(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) >= 2 && raw[0] == '{' && raw[len(raw)-1] == '}' && len(bytes.TrimSpace(raw[1:len(raw)-1])) == 0
}

func describeLineError(err error) string {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		if typeErr.Field == "" {
			return "not a JSON object: got a JSON " + typeErr.Value
		}
		return fmt.Sprintf("%s: got a JSON %s", typeErr.Field, typeErr.Value)
	}
	var unknown *unknownFieldError
	if errors.As(err, &unknown) {
		return unknown.Error()
	}
	return "not a JSON object: " + err.Error()
}
