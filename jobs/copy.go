package jobs

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// The COPY path, for inserters of many jobs at once (`enqueue bulk`).
//
// River's InsertManyFastTx prepares a batch (each job's options, its
// encoded args, the insert middleware), then copies it, then notifies: one
// step after the other on the caller's goroutine, with the server idle
// while the next batch is prepared (0.64 s of a 4.15 s bulk of 300,000
// jobs on the project's two-core machine). EncodeCopy does the preparing,
// and can run on many goroutines at once, ahead of the COPY; CopyFromTx
// only streams the rows, so that the server copies without waiting.
//
// The rows are the ones InsertManyFastTx writes (TestCopy compares them,
// column by column, with River's for the same jobs), in Postgres's text
// format, the cheapest for the client to write: args and metadata as they
// are, escaped.

// copyColumns are the columns of river_job a CopyRow fills, in its order:
// those River's own COPY fills.
const copyColumns = "args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags, unique_key, unique_states"

// tagRE is River's rule for tags (river/insert_opts.go).
var tagRE = regexp.MustCompile(`\A[\w][\w\-]+[\w]\z`)

// ValidTag says whether River accepts tag: 3 to 255 letters, digits, _ or
// -, starting and ending with a letter or digit.
func ValidTag(tag string) bool { return len(tag) <= 255 && tagRE.MatchString(tag) }

// CopyRow is one job encoded by EncodeCopy, for a CopyBatch.
type CopyRow struct {
	// data is the row, newline included. Its capacity runs on over the
	// rows EncodeCopy wrote after it, so that a batch takes consecutive
	// rows as one slice, without copying them.
	data  []byte
	queue string // the job's queue when it is available at once, else ""
}

// CopyBatch is rows for CopyTx or CopyFromTx.
type CopyBatch struct {
	data   [][]byte // runs of consecutive rows
	n      int
	queues map[string]struct{} // the queues with a job available at once
}

// Add appends a row to the batch.
func (b *CopyBatch) Add(r CopyRow) {
	if k := len(b.data) - 1; k >= 0 && follows(b.data[k], r.data) {
		b.data[k] = b.data[k][:len(b.data[k])+len(r.data)]
	} else {
		b.data = append(b.data, r.data)
	}
	b.n++
	if r.queue != "" {
		if b.queues == nil {
			b.queues = map[string]struct{}{}
		}
		b.queues[r.queue] = struct{}{}
	}
}

// Len is the number of rows in the batch.
func (b *CopyBatch) Len() int { return b.n }

// follows says whether row starts where run ends, in the same array.
func follows(run, row []byte) bool {
	return len(row) > 0 && len(run) < cap(run) && &run[:len(run)+1][len(run)] == &row[0]
}

// EncodeCopy encodes the jobs params would insert with the Inserter's
// client (InsertManyFastTx) as rows for CopyTx: the same options (the
// call's, then the args' InsertOpts, then River's defaults), and the same
// insert middleware (the trace context, WithUniqueKey's key, the seal).
// now is the created_at of every job, and the scheduled_at of those not
// scheduled: give the same now to the encodings of one insert, so that its
// unscheduled jobs run in the order of their ids.
//
// It is safe to call from many goroutines at once. It refuses River's own
// UniqueOpts (its keys are River's to compute: use WithUniqueKey, or
// InsertManyTx), a queue name, priority or tag that River would refuse, and
// args that do not encode. The args' JSON is checked by the database at
// COPY, not here: a RawArgs is taken as it is.
func (i *Inserter) EncodeCopy(ctx context.Context, now time.Time, params []river.InsertManyParams) ([]CopyRow, error) {
	if len(params) == 0 {
		return nil, nil
	}
	insert := make([]rivertype.JobInsertParams, len(params))
	ptrs := make([]*rivertype.JobInsertParams, len(params))
	var queue string // the last queue name checked
	for n, p := range params {
		if err := copyParams(&insert[n], now, p, &queue); err != nil {
			return nil, err
		}
		ptrs[n] = &insert[n]
	}
	// The insert middleware, outermost first, as River runs it; the
	// innermost step only lets the (changed) params through.
	inner := func(context.Context) ([]*rivertype.JobInsertResult, error) {
		return make([]*rivertype.JobInsertResult, len(ptrs)), nil
	}
	for _, mw := range slices.Backward(i.middleware) {
		next := inner
		inner = func(ctx context.Context) ([]*rivertype.JobInsertResult, error) {
			return mw.InsertMany(ctx, ptrs, next)
		}
	}
	if _, err := inner(ctx); err != nil {
		return nil, err
	}

	stamp := appendTimestamp(nil, now)
	size := 0
	for _, p := range ptrs {
		size += len(p.EncodedArgs) + len(p.Metadata) + copyRowOverhead
		for _, tag := range p.Tags {
			size += len(tag) + 3
		}
	}
	rows := make([]CopyRow, len(ptrs))
	buf := make([]byte, 0, size)
	ends := make([]int, len(ptrs))
	for n, p := range ptrs {
		buf = appendCopyRow(buf, p, now, stamp)
		ends[n] = len(buf)
	}
	start := 0
	for n, p := range ptrs {
		rows[n].data = buf[start:ends[n]]
		start = ends[n]
		if p.State == rivertype.JobStateAvailable {
			rows[n].queue = p.Queue
		}
	}
	return rows, nil
}

// copyRowOverhead is about a row's length without its args, metadata and
// tags, for sizing a buffer of rows at once.
const copyRowOverhead = 160

// copyParams fills p as River's insertParamsFromConfigArgsAndOptions does
// for an insert-only client with River's defaults, which is what NewInserter
// builds.
// checked is a queue name known to be valid, or "".
func copyParams(p *rivertype.JobInsertParams, now time.Time, mp river.InsertManyParams, checked *string) error {
	args := mp.Args
	var encoded []byte
	if raw, ok := args.(RawArgs); ok {
		encoded = raw.JSON
	} else {
		var err error
		if encoded, err = json.Marshal(args); err != nil {
			return fmt.Errorf("jobs: encode %s args: %w", args.Kind(), err)
		}
	}
	opts := mp.InsertOpts
	if opts == nil {
		opts = &river.InsertOpts{}
	}
	var argOpts river.InsertOpts
	if w, ok := args.(river.JobArgsWithInsertOpts); ok {
		argOpts = w.InsertOpts()
	}
	if !isZeroUnique(opts.UniqueOpts) || !isZeroUnique(argOpts.UniqueOpts) {
		return fmt.Errorf("jobs: copy %s: River's UniqueOpts cannot go through COPY; use WithUniqueKey or InsertManyTx", args.Kind())
	}
	queue := cmp.Or(opts.Queue, argOpts.Queue, river.QueueDefault)
	if queue != *checked {
		if err := ValidateQueueName(queue); err != nil {
			return fmt.Errorf("jobs: copy %s: %w", args.Kind(), err)
		}
		*checked = queue
	}
	priority := cmp.Or(opts.Priority, argOpts.Priority, river.PriorityDefault)
	if priority < 1 || priority > 4 {
		return fmt.Errorf("jobs: copy %s: priority %d: must be 1 to 4", args.Kind(), priority)
	}
	tags := opts.Tags
	if tags == nil {
		tags = argOpts.Tags
	}
	for _, tag := range tags {
		if !ValidTag(tag) {
			return fmt.Errorf("jobs: copy %s: tag %q: tags are 3 to 255 letters, digits, _ or -", args.Kind(), tag)
		}
	}
	if tags == nil {
		tags = []string{}
	}
	// Clipped: the seal's middleware appends its tag, which must not land
	// in spare capacity that the params of other jobs share.
	tags = slices.Clip(tags)
	metadata := opts.Metadata
	if len(metadata) == 0 {
		metadata = []byte("{}")
	}
	*p = rivertype.JobInsertParams{
		Args:        args,
		CreatedAt:   &now,
		EncodedArgs: encoded,
		Kind:        args.Kind(),
		MaxAttempts: cmp.Or(opts.MaxAttempts, argOpts.MaxAttempts, river.MaxAttemptsDefault),
		Metadata:    metadata,
		Priority:    priority,
		Queue:       queue,
		ScheduledAt: &now,
		State:       rivertype.JobStateAvailable,
		Tags:        tags,
	}
	switch {
	case !opts.ScheduledAt.IsZero():
		p.ScheduledAt, p.State = &opts.ScheduledAt, rivertype.JobStateScheduled
	case !argOpts.ScheduledAt.IsZero():
		at := argOpts.ScheduledAt
		p.ScheduledAt, p.State = &at, rivertype.JobStateScheduled
	}
	if opts.Pending {
		p.State = rivertype.JobStatePending
	}
	return nil
}

func isZeroUnique(u river.UniqueOpts) bool {
	return !u.ByArgs && u.ByPeriod == 0 && !u.ByQueue && u.ByState == nil && !u.ExcludeKind
}

// appendCopyRow appends p as a line of COPY's text format, in copyColumns'
// order; stamp is now, formatted.
func appendCopyRow(b []byte, p *rivertype.JobInsertParams, now time.Time, stamp []byte) []byte {
	at := func(b []byte, t *time.Time) []byte {
		if t == nil || t.Equal(now) {
			return append(b, stamp...)
		}
		return appendTimestamp(b, *t)
	}
	b = appendCopyText(b, p.EncodedArgs)
	b = append(b, '\t')
	b = at(b, p.CreatedAt)
	b = append(b, '\t')
	b = appendCopyText(b, []byte(p.Kind))
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(min(p.MaxAttempts, 32767)), 10)
	b = append(b, '\t')
	b = appendCopyText(b, p.Metadata)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(p.Priority), 10)
	b = append(b, '\t')
	b = appendCopyText(b, []byte(p.Queue))
	b = append(b, '\t')
	b = at(b, p.ScheduledAt)
	b = append(b, '\t')
	b = append(b, p.State...)
	b = append(b, '\t')
	b = appendTextArray(b, p.Tags)
	b = append(b, '\t')
	if p.UniqueKey == nil {
		b = append(b, `\N`...)
	} else {
		b = append(b, `\\x`...) // bytea's hex form, its backslash escaped
		b = hex.AppendEncode(b, p.UniqueKey)
	}
	b = append(b, '\t')
	if p.UniqueStates == 0 {
		b = append(b, `\N`...)
	} else {
		for bit := 7; bit >= 0; bit-- { // bit(8), as River stores its byte
			b = append(b, '0'+(p.UniqueStates>>bit)&1)
		}
	}
	return append(b, '\n')
}

// appendTimestamp appends t as timestamptz's input, to the microsecond
// (what the column keeps; pgx's binary form truncates the same way).
func appendTimestamp(b []byte, t time.Time) []byte {
	return t.UTC().AppendFormat(b, "2006-01-02 15:04:05.999999+00")
}

// appendCopyText appends s escaped for COPY's text format: a backslash,
// and the characters that end a field or a row.
func appendCopyText(b, s []byte) []byte {
	last := 0
	for n, c := range s {
		var esc byte
		switch c {
		case '\\':
			esc = '\\'
		case '\t':
			esc = 't'
		case '\n':
			esc = 'n'
		case '\r':
			esc = 'r'
		default:
			continue
		}
		b = append(b, s[last:n]...)
		b = append(b, '\\', esc)
		last = n + 1
	}
	return append(b, s[last:]...)
}

// appendTextArray appends tags as a text[] literal, every element quoted,
// escaped for the literal and then for COPY.
func appendTextArray(b []byte, tags []string) []byte {
	b = append(b, '{')
	for n, tag := range tags {
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		for _, c := range []byte(tag) {
			switch c {
			case '"':
				b = append(b, `\\"`...) // \" in the literal, its backslash escaped for COPY
			case '\\':
				b = append(b, `\\\\`...)
			case '\t':
				b = append(b, `\t`...)
			case '\n':
				b = append(b, `\n`...)
			case '\r':
				b = append(b, `\r`...)
			default:
				b = append(b, c)
			}
		}
		b = append(b, '"')
	}
	return append(b, '}')
}

// CopyTx copies the batch's rows into river_job in tx: CopyFromTx of one
// batch.
func (i *Inserter) CopyTx(ctx context.Context, tx pgx.Tx, b *CopyBatch) (int, error) {
	return i.CopyFromTx(ctx, tx, func() (*CopyBatch, error) {
		next := b
		b = nil
		return next, nil
	})
}

// CopyFromTx copies into river_job in tx, in one COPY, the rows of the
// batches next returns until it returns nil, and returns how many went in.
// The server copies a batch while the caller prepares the next: next is
// called on a goroutine of the connection's while the COPY is open, one
// call at a time, and may wait for its batch; an error it returns ends the
// COPY and is returned.
//
// It sends River's insert notification for each queue that got a job
// available at once (delivered when tx commits, so the queue's workers
// fetch at once, as after River's own inserts). A queue whose bound is
// reached refuses the whole COPY: the error is then a *QueueFullError.
func (i *Inserter) CopyFromTx(ctx context.Context, tx pgx.Tx, next func() (*CopyBatch, error)) (int, error) {
	table := pgx.Identifier{"river_job"}
	if i.schema != "" {
		table = pgx.Identifier{i.schema, "river_job"}
	}
	r := &batchReader{next: next, queues: map[string]struct{}{}}
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, r, "COPY "+table.Sanitize()+" ("+copyColumns+") FROM STDIN")
	if r.err != nil {
		return 0, r.err
	}
	if err != nil {
		return 0, fmt.Errorf("jobs: copy %d jobs: %w", r.n, AsQueueFull(err))
	}
	if int(tag.RowsAffected()) != r.n {
		return 0, fmt.Errorf("jobs: copy %d jobs: the database took %d", r.n, tag.RowsAffected())
	}
	if len(r.queues) > 0 {
		payloads := make([]string, 0, len(r.queues))
		for q := range r.queues {
			payloads = append(payloads, fmt.Sprintf(`{"queue": %q}`, q))
		}
		err := riverpgxv5.New(nil).UnwrapExecutor(tx).NotifyMany(ctx, &riverdriver.NotifyManyParams{
			Payload: payloads,
			Schema:  i.schema,
			Topic:   insertTopic,
		})
		if err != nil {
			return 0, fmt.Errorf("jobs: copy %d jobs: notify: %w", r.n, err)
		}
	}
	return r.n, nil
}

// batchReader reads the rows of the batches next returns, one after the
// other, and counts them and their queues.
type batchReader struct {
	next   func() (*CopyBatch, error)
	runs   [][]byte // the batch's runs not yet read
	cur    []byte
	n      int
	queues map[string]struct{}
	err    error // next's
}

func (r *batchReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if len(r.runs) > 0 {
			r.cur, r.runs = r.runs[0], r.runs[1:]
			continue
		}
		b, err := r.next()
		if err != nil {
			r.err = err
			return 0, err
		}
		if b == nil {
			return 0, io.EOF
		}
		r.runs, r.n = b.data, r.n+b.n
		for q := range b.queues {
			r.queues[q] = struct{}{}
		}
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}

// insertTopic is River's channel for insert notifications
// (notifier.NotificationTopicInsert).
const insertTopic = "river_insert"
