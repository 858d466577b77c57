package ferrycli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/jobs"
)

const (
	// bulkMaxLine is the longest line bulk reads: 64 KiB of args plus room
	// for the other fields.
	bulkMaxLine = jobs.MaxArgsBytes + 64<<10
	// bulkDefaultBatch is how many jobs go into one COPY by default.
	bulkDefaultBatch = 10_000
)

func enqueueBulk() *cli.Command {
	return &cli.Command{
		Name:  "bulk",
		Usage: "insert many jobs from a JSON Lines file, all or nothing",
		Description: `Each line of the file is one job, a JSON object with these fields:

   kind          required: a built-in kind or one a worker registered
   args          JSON object of at most 64 KiB (default {})
   queue         default: the kind's queue
   priority      1 (first) to 4 (last); default 1
   scheduled_at  RFC 3339 time; default now
   max_attempts  at least 1; default River's 25
   unique_key    at most one live job of this kind with this key
   tags          array of tags (3 to 255 letters, digits, _ or -)

Blank lines are skipped; a line is at most 128 KiB. Every line is checked
first, the kinds against the database. If any line is invalid, the first one
is reported with its line number (and how many others are invalid), the exit
code is 2, and nothing is inserted. Then the file is read again and the jobs
are inserted in file order in one transaction, 10,000 at a time (fewer when
lines are large) with COPY (River's InsertManyFast): all of them or, on
failure, none.

Lines with a unique_key cannot go through COPY (a duplicate would fail the
whole COPY), so runs of such lines are inserted with River's InsertMany in the
same transaction, and a line whose key matches a live job, or an earlier line
of the file, is skipped and counted as a duplicate.

A file is read twice and never held in memory: a run takes about 50 MB,
whatever the file's size. Standard input (--file -) cannot be read twice, so
it is kept in memory between the two passes: expect up to twice its size on
top (a 32 MB input, 1,000,000 short lines, peaks near 100 MB).

On a terminal, progress bars show on stderr; otherwise one summary line is
printed when done. With --json the summary is {"inserted", "duplicates",
"seconds"}.

Examples:
   enqueue bulk --file jobs.jsonl
   generate-jobs | enqueue bulk --file - --json
   printf '%s\n' '{"kind":"ferry.noop"}' \
     '{"kind":"http.request","args":{"url":"http://app:8000/warm"},"queue":"web","priority":2}' \
     '{"kind":"ferry.noop","scheduled_at":"2026-12-01T06:00:00Z","tags":["nightly"],"unique_key":"n-1201"}' \
     | enqueue bulk --file -`,
		Flags: []cli.Flag{
			databaseURLFlag(),
			&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "JSON Lines file, one job per line, or - for stdin"},
			&cli.IntFlag{Name: "batch-size", Value: bulkDefaultBatch, Usage: "jobs per COPY (100 to 100000)"},
			jsonFlag(),
		},
		Action: runBulk,
	}
}

// bulkResult is what bulk prints.
type bulkResult struct {
	Inserted   int     `json:"inserted"`
	Duplicates int     `json:"duplicates"`
	Seconds    float64 `json:"seconds"`
}

func runBulk(c *cli.Context) error {
	start := time.Now()
	if c.NArg() > 0 {
		return usageErrorf("bulk takes no arguments, got %q; give the file with --file", c.Args().First())
	}
	name := c.String("file")
	if name == "" {
		return usageErrorf("--file is required: a JSON Lines file, or - for stdin")
	}
	batch := c.Int("batch-size")
	if batch < 100 || batch > 100_000 {
		return usageErrorf("--batch-size %d: must be 100 to 100000", batch)
	}
	src, err := openBulkSource(name, c.App.Reader)
	if err != nil {
		return err
	}
	defer src.close()
	prog := newProgress(c.App.ErrWriter)
	b := &bulk{kinds: map[string]*kindInfo{}, batch: batch}

	var res bulkResult
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		b.pool = pool
		r, size, err := src.first()
		if err != nil {
			return err
		}
		total, err := b.validate(ctx, prog.reader(r, size, "checking"))
		prog.done()
		if err != nil || total == 0 {
			return err
		}
		r, err = src.second()
		if err != nil {
			return err
		}
		ins, err := jobs.NewInserter(pool)
		if err != nil {
			return err
		}
		res, err = b.insert(ctx, pool, ins.Client(), r, total, prog.counter(total, "inserting"))
		prog.done()
		return err
	})
	if err != nil {
		return err
	}
	res.Seconds = time.Since(start).Seconds()
	out := outputFrom(c)
	if out.json {
		return out.JSON(res)
	}
	msg := fmt.Sprintf("inserted %d jobs in %s (%s/s)", res.Inserted, fmtSeconds(res.Seconds), thousands(int64(float64(res.Inserted)/max(res.Seconds, 1e-9))))
	if res.Duplicates > 0 {
		msg += fmt.Sprintf("; %d duplicates skipped", res.Duplicates)
	}
	_, err = fmt.Fprintln(out.w, msg)
	return err
}

// bulkSource reads the input twice: a file is opened again, stdin is kept in
// memory by the first pass.
type bulkSource struct {
	path  string // "" for stdin
	stdin io.Reader
	spool spool
	files []*os.File // opened, to close
}

func openBulkSource(name string, stdin io.Reader) (*bulkSource, error) {
	if name == "-" {
		return &bulkSource{stdin: stdin}, nil
	}
	st, err := os.Stat(name)
	if err != nil {
		return nil, usageErrorf("--file: %v", err)
	}
	if st.IsDir() {
		return nil, usageErrorf("--file %s: is a directory", name)
	}
	return &bulkSource{path: name}, nil
}

// first returns the reader of the first pass and its size (-1 if unknown).
func (s *bulkSource) first() (io.Reader, int64, error) {
	if s.path == "" {
		return io.TeeReader(s.stdin, &s.spool), -1, nil
	}
	f, err := s.open()
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("bulk: %w", err)
	}
	return f, st.Size(), nil
}

func (s *bulkSource) second() (io.Reader, error) {
	if s.path == "" {
		return s.spool.reader(), nil
	}
	return s.open()
}

func (s *bulkSource) open() (*os.File, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, usageErrorf("--file: %v", err)
	}
	s.files = append(s.files, f)
	return f, nil
}

func (s *bulkSource) close() {
	for _, f := range s.files {
		_ = f.Close() // read only
	}
}

// spoolChunk is the size of the pieces stdin is kept in.
const spoolChunk = 1 << 20

// spool keeps what is written to it in chunks: growing one buffer would copy
// it, and hold it twice for a moment.
type spool struct{ chunks [][]byte }

func (s *spool) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(s.chunks) == 0 || len(s.chunks[len(s.chunks)-1]) == spoolChunk {
			s.chunks = append(s.chunks, make([]byte, 0, spoolChunk))
		}
		last := &s.chunks[len(s.chunks)-1]
		k := min(len(p), spoolChunk-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

func (s *spool) reader() io.Reader {
	rs := make([]io.Reader, len(s.chunks))
	for i, c := range s.chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}

// bulk validates and inserts lines. kinds caches each distinct kind's lookup
// (nil for an unknown kind), so the database is asked once per kind.
type bulk struct {
	pool  *pgxpool.Pool
	batch int

	mu    sync.Mutex // guards kinds
	kinds map[string]*kindInfo
}

type kindInfo struct {
	known jobs.Known
	// emptyArgs is the kind's {} args when {} is valid for it: the common
	// case of a job without args skips parsing.
	emptyArgs *jobs.RawArgs
	// opts are the options of a line that gives none.
	opts *river.InsertOpts
}

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
}

// parsedLine is a valid line: River's insert params and its unique key.
type parsedLine struct {
	params    river.InsertManyParams
	uniqueKey string // "" when none
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

// validate checks every line and returns how many jobs the input holds. An
// invalid line is a UsageError naming the first one and counting the others.
//
// Lines are parsed by one worker per CPU: the database waits for this pass,
// so it may use every core.
func (b *bulk) validate(ctx context.Context, r io.Reader) (int, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	blocks := make(chan *lineBlock, 4)
	workers := min(runtime.GOMAXPROCS(0), 8)
	results := make([]validation, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			res := &results[i]
			for blk := range blocks {
				if res.err != nil {
					continue // drain
				}
				blk.each(func(n int, line []byte) {
					if res.err != nil {
						return
					}
					_, err := b.parse(ctx, n, line)
					res.add(err)
					if res.err != nil {
						cancel(res.err)
					}
				})
			}
		})
	}

	// The reader gathers lines into blocks, so that a worker gets many lines
	// per channel operation.
	blk := &lineBlock{}
	err := scanLines(r, func(n int, line []byte) error {
		blk.add(n, line)
		if len(blk.nums) < lineBlockSize && len(blk.data) < lineBlockBytes {
			return nil
		}
		select {
		case blocks <- blk:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		blk = &lineBlock{}
		return nil
	})
	if err == nil && len(blk.nums) > 0 {
		select {
		case blocks <- blk:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
	}
	close(blocks)
	wg.Wait()

	var total validation
	for _, res := range results {
		if res.err != nil {
			return 0, res.err
		}
		total.merge(res)
	}
	var le *lineError
	if errors.As(err, &le) { // a line too long ends the scan
		total.add(err)
	} else if err != nil {
		return 0, err
	}
	switch {
	case total.invalid == 1:
		return 0, &UsageError{Err: fmt.Errorf("%w; nothing inserted", total.first)}
	case total.invalid > 1:
		return 0, &UsageError{Err: fmt.Errorf("%w (%d more invalid %s); nothing inserted", total.first, total.invalid-1, plural(total.invalid-1, "line", "lines"))}
	}
	return total.jobs, nil
}

// A validation worker gets lines lineBlockSize at a time, or fewer when
// they add up to lineBlockBytes.
const (
	lineBlockSize  = 4096
	lineBlockBytes = 1 << 20
)

// lineBlock is a run of lines copied out of the scanner's buffer.
type lineBlock struct {
	data []byte
	ends []int // end of each line in data
	nums []int // line numbers
}

func (b *lineBlock) add(n int, line []byte) {
	b.data = append(b.data, line...)
	b.ends = append(b.ends, len(b.data))
	b.nums = append(b.nums, n)
}

func (b *lineBlock) each(fn func(n int, line []byte)) {
	start := 0
	for i, end := range b.ends {
		fn(b.nums[i], b.data[start:end])
		start = end
	}
}

// validation tallies the lines one worker checked.
type validation struct {
	jobs, invalid int
	first         *lineError // the invalid line with the lowest number
	err           error      // not bad input: the database failed
}

func (v *validation) add(err error) {
	var le *lineError
	switch {
	case err == nil:
		v.jobs++
	case errors.As(err, &le):
		v.invalid++
		if v.first == nil || le.line < v.first.line {
			v.first = le
		}
	default:
		v.err = err
	}
}

func (v *validation) merge(o validation) {
	v.jobs += o.jobs
	v.invalid += o.invalid
	if o.first != nil && (v.first == nil || o.first.line < v.first.line) {
		v.first = o.first
	}
}

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
		msg := err.Error()
		if !strings.HasPrefix(msg, "args") {
			msg = "args: " + msg
		}
		return bad("%s", msg)
	}

	if l.Queue == "" && l.Priority == nil && l.ScheduledAt == nil && l.MaxAttempts == nil && l.Tags == nil && l.UniqueKey == nil {
		// The common line, kind and args only, shares its kind's options
		// (River only reads them).
		return parsedLine{params: river.InsertManyParams{Args: args, InsertOpts: k.opts}}, nil
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
		if len(tag) > 255 || !tagRE.MatchString(tag) {
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
	return parsedLine{params: river.InsertManyParams{Args: args, InsertOpts: opts}, uniqueKey: key}, nil
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
		l.ScheduledAt != nil, l.MaxAttempts != nil, l.UniqueKey != nil, l.Tags != nil} {
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

// kind looks a kind up once and caches the answer.
func (b *bulk) kind(ctx context.Context, name string) (*kindInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k, ok := b.kinds[name]; ok {
		return k, nil
	}
	known, ok, err := jobs.Lookup(ctx, b.pool, name)
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
			return nil, errors.New("ferry's tables are missing: run `worker migrate up` first")
		}
		return nil, err
	}
	var k *kindInfo
	if ok {
		k = &kindInfo{known: known, opts: &river.InsertOpts{Queue: known.Queue, Priority: 1}}
		if args, err := jobs.ParseRaw(name, []byte("{}")); err == nil {
			k.emptyArgs = &args
		}
	}
	b.kinds[name] = k
	return k, nil
}

// bulkChunk is a run of lines inserted by one call: with COPY, or with
// InsertMany when the lines have unique keys.
type bulkChunk struct {
	params []river.InsertManyParams
	unique bool
	dups   int // lines skipped as repeats of a key earlier in the chunk
	bytes  int // size of the lines
}

// chunkBytes bounds a chunk's lines, so that chunks of large args stay
// small in memory: 10,000 lines of 64 KiB would be 640 MB.
const chunkBytes = 16 << 20

// insert reads the input again and inserts it in one transaction. A reader
// goroutine parses the next chunk while the current one is copied.
func (b *bulk) insert(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], r io.Reader, total int, prog *progressbar.ProgressBar) (bulkResult, error) {
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	chunks := make(chan bulkChunk, 2)
	var (
		readErr error
		read    int
	)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(chunks)
		read, readErr = b.readChunks(ctx, r, chunks)
	}()

	var res bulkResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for ch := range chunks {
			res.Duplicates += ch.dups
			if ch.unique {
				rs, err := client.InsertManyTx(ctx, tx, ch.params)
				if err != nil {
					return fmt.Errorf("bulk: insert jobs with unique keys: %w", err)
				}
				for _, r := range rs {
					if r.UniqueSkippedAsDuplicate {
						res.Duplicates++
					} else {
						res.Inserted++
					}
				}
			} else {
				n, err := client.InsertManyFastTx(ctx, tx, ch.params)
				if err != nil {
					return fmt.Errorf("bulk: copy jobs: %w", err)
				}
				res.Inserted += n
			}
			if prog != nil {
				_ = prog.Add(len(ch.params) + ch.dups)
			}
		}
		<-readDone
		if readErr != nil {
			return readErr
		}
		if read != total {
			return fmt.Errorf("bulk: the input changed between the check and the insert (%d jobs, then %d); nothing inserted", total, read)
		}
		return nil
	})
	cancel(err)
	<-readDone
	if err != nil {
		if parent.Err() != nil {
			return bulkResult{}, fmt.Errorf("bulk: interrupted; nothing inserted: %w", context.Cause(parent))
		}
		return bulkResult{}, err
	}
	return res, nil
}

// readChunks parses the input into chunks of at most b.batch jobs, in file
// order: a chunk holds lines all with or all without a unique key. Repeats of
// a unique key within one chunk are dropped and counted (InsertMany cannot
// upsert one key twice in a statement); repeats across chunks are caught by
// the database, in the same transaction.
func (b *bulk) readChunks(ctx context.Context, r io.Reader, out chan<- bulkChunk) (int, error) {
	var (
		cur  bulkChunk
		keys = map[string]struct{}{}
		read int
	)
	send := func() error {
		if len(cur.params) == 0 && cur.dups == 0 {
			return nil
		}
		select {
		case out <- cur:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		cur = bulkChunk{params: make([]river.InsertManyParams, 0, b.batch)}
		clear(keys)
		return nil
	}
	cur.params = make([]river.InsertManyParams, 0, b.batch)
	err := scanLines(r, func(n int, line []byte) error {
		p, err := b.parse(ctx, n, line)
		if err != nil {
			return err
		}
		read++
		unique := p.uniqueKey != ""
		if (unique != cur.unique && len(cur.params) > 0) || len(cur.params) >= b.batch || cur.bytes >= chunkBytes {
			if err := send(); err != nil {
				return err
			}
		}
		cur.unique = unique
		if unique {
			k := p.params.Args.Kind() + "\x00" + p.uniqueKey
			if _, seen := keys[k]; seen {
				cur.dups++
				return nil
			}
			keys[k] = struct{}{}
		}
		cur.params = append(cur.params, p.params)
		cur.bytes += len(line)
		return nil
	})
	if err != nil {
		var le *lineError
		if errors.As(err, &le) {
			err = fmt.Errorf("bulk: the input changed since it was checked: %w", err)
		}
		return read, err
	}
	return read, send()
}

// progress shows bars on stderr when it is a terminal, and nothing
// otherwise.
type progress struct {
	w   io.Writer
	tty bool
	bar *progressbar.ProgressBar
}

func newProgress(w io.Writer) *progress { return &progress{w: w, tty: isTerminal(w)} }

// reader returns r, counting its bytes on a bar (a spinner when size < 0).
func (p *progress) reader(r io.Reader, size int64, desc string) io.Reader {
	if !p.tty {
		return r
	}
	p.bar = progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionFullWidth(),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetRenderBlankState(true),
	)
	rd := progressbar.NewReader(r, p.bar)
	return &rd
}

// counter returns a bar counting n jobs, or nil when not on a terminal.
func (p *progress) counter(n int, desc string) *progressbar.ProgressBar {
	if !p.tty {
		return nil
	}
	p.bar = progressbar.NewOptions(n,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("jobs"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionFullWidth(),
	)
	return p.bar
}

// done clears the current bar, so what follows starts on a clean line.
func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Clear()
		p.bar = nil
	}
}

// thousands formats n with commas: 161,000.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtSeconds prints a duration in seconds with two significant decimals
// below 1s: 0.042s, 6.2s.
func fmtSeconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.2gs", s)
	}
	return fmt.Sprintf("%.1fs", s)
}
