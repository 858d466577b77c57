package ferrycli

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/jobs"
)

// `enqueue bulk` in parts: this file holds the command and the kind cache;
// bulk_source.go opens the input, bulk_line.go parses one line,
// bulk_parse.go parses every line on all cores, in input order,
// bulk_copy.go encodes them for COPY (on the same cores) and inserts them
// in one transaction as they come, and bulk_progress.go draws the bar.

const (
	// bulkMaxLine is the longest line bulk reads: 64 KiB of args plus room
	// for the other fields.
	bulkMaxLine = jobs.MaxArgsBytes + 64<<10
	// bulkDefaultBatch is how many jobs with a unique key go into one
	// InsertMany by default.
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
   debounce      {"key", "window", "max_wait"}: jobs of this kind and key
                 collapse into one, run window after the last (and no later
                 than max_wait, optional, after the first), with the last
                 one's args; a run while the key's job runs is one run after
                 it (enqueue job --debounce)

Blank lines are skipped; a line is at most 128 KiB. The input is read once.
Its lines are checked (the kinds against the database), parsed and turned
into River's rows on every core, and the jobs are inserted in file order in
one transaction as they come, streamed into one COPY: all of them or, on
failure, none. The rows are the ones River's InsertManyFast writes (the same
defaults, the trace context, the seal), and every job not scheduled gets the
same scheduled_at, so that they run in file order. If any line is invalid,
the copying stops, the rest is still read to count the invalid lines, the
first one is reported with its line number (and how many others are
invalid), the exit code is 2, and the transaction rolls back: nothing is
inserted.

Lines with a unique_key cannot go through COPY (a duplicate would fail the
whole COPY), so runs of such lines are inserted with River's InsertMany in the
same transaction, --batch-size at a time, and a line whose key matches a live
job, or an earlier line of the file, is skipped and counted as a duplicate.
Lines with a debounce go the same way; one whose key matches a live job, or an
earlier line, collapses into it (its args win) and is counted as a duplicate.

Neither a file nor standard input is ever held in memory: a run takes
about 50 MB, whatever the input's size.

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
			&cli.IntFlag{Name: "batch-size", Value: bulkDefaultBatch, Usage: "jobs with a unique_key per InsertMany (100 to 100000)"},
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
	r, size, closeSrc, err := openBulkSource(name, c.App.Reader)
	if err != nil {
		return err
	}
	defer closeSrc()
	prog := newProgress(c.App.ErrWriter)
	b := &bulk{kinds: map[string]*kindInfo{}, batch: batch}

	var res bulkResult
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		b.pool = pool
		ins, err := jobs.NewInserter(pool)
		if err != nil {
			return err
		}
		b.ins = ins
		res, err = b.insert(ctx, pool, prog.reader(r, size, "inserting"))
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

// bulk validates and inserts lines. kinds caches each distinct kind's lookup
// (nil for an unknown kind), so the database is asked once per kind.
type bulk struct {
	pool  *pgxpool.Pool
	ins   *jobs.Inserter // encodes and copies the jobs
	batch int
	// now is the created_at of every job, and the scheduled_at of every
	// job not scheduled, so that they run in file order (of their ids).
	now time.Time

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

// kind looks a kind up once and caches the answer.
func (b *bulk) kind(ctx context.Context, name string) (*kindInfo, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k, ok := b.kinds[name]; ok {
		return k, nil
	}
	known, ok, err := jobs.Lookup(ctx, b.pool, name)
	if err != nil {
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
