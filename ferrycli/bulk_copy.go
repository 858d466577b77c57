package ferrycli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// bulkChunk is a run of lines handed to the transaction at once: a parsed
// block's rows for the COPY under way, or, when the lines have unique keys,
// params for one InsertMany.
type bulkChunk struct {
	rows   jobs.CopyBatch
	params []river.InsertManyParams
	unique bool
	dups   int // lines skipped as repeats of a key earlier in the chunk
	bytes  int // size of the lines
}

// encode turns the block's lines without a unique key into rows for COPY
// (jobs.Inserter.EncodeCopy: River's options and ferry's insert
// middleware, the seal included) on the parser's goroutine, so that the
// COPY never waits for rows to be prepared (jobs/copy.go says what River's
// InsertManyFastTx leaves idle and measures it). The lines with a unique
// key keep their params for InsertMany.
func (b *bulk) encode(ctx context.Context, blk *lineBlock) error {
	var params []river.InsertManyParams
	for _, p := range blk.parsed {
		if p.uniqueKey == "" {
			params = append(params, p.params)
		}
	}
	rows, err := b.ins.EncodeCopy(ctx, b.now, params)
	if err != nil {
		return fmt.Errorf("bulk: %w; nothing inserted", err)
	}
	n := 0
	for i := range blk.parsed {
		if blk.parsed[i].uniqueKey == "" {
			blk.parsed[i].row, blk.parsed[i].params = rows[n], river.InsertManyParams{}
			n++
		}
	}
	return nil
}

// chunkBytes bounds a chunk's lines, so that chunks of large args stay
// small in memory: 10,000 lines of 64 KiB with unique keys would be 640 MB.
const chunkBytes = 16 << 20

// insert reads the input once and inserts its jobs in one transaction:
// the lines are parsed and encoded on every core (parseInput) while the
// rows encoded before them stream into one COPY, in input order; a run of
// lines with unique keys ends the COPY, goes in with InsertMany, and the
// lines after it start the next COPY. An invalid line ends the copying;
// the rest is still read, to count the invalid lines, and the transaction
// rolls back: nothing is inserted.
func (b *bulk) insert(ctx context.Context, pool *pgxpool.Pool, r io.Reader) (bulkResult, error) {
	// The transaction holds one of the pool's connections while the parsers
	// look kinds up on another (connect gives the CLI four).
	parent := ctx
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	chunks := make(chan bulkChunk, 2)
	var (
		check    validation
		parseErr error
		copied   bool // some jobs went in before the transaction failed
	)
	parseDone := make(chan struct{})
	b.now = time.Now() // read by the parsers
	go func() {
		defer close(parseDone)
		defer close(chunks)
		c := chunker{batch: b.batch, out: chunks, ctx: ctx, keys: map[string]int{}}
		check, parseErr = b.parseInput(ctx, r, c.add)
		if parseErr == nil && check.invalid == 0 {
			parseErr = c.send()
		}
	}()

	var res bulkResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// A run of chunks without unique keys goes in as one COPY, read
		// from the channel while the server copies; a chunk with unique
		// keys ends it and is inserted next.
		var held *bulkChunk // a chunk with unique keys that ended a COPY
		take := func() (*bulkChunk, bool) {
			if ch := held; ch != nil {
				held = nil
				return ch, true
			}
			ch, ok := <-chunks
			return &ch, ok
		}
		for {
			ch, ok := take()
			if !ok {
				break
			}
			copied = true
			res.Duplicates += ch.dups
			if ch.unique {
				// The Inserter's: a debounced line that finds its key's job
				// collapses into it.
				rs, err := b.ins.InsertManyTx(ctx, tx, ch.params)
				if err != nil {
					return fmt.Errorf("bulk: insert jobs with unique keys: %w; nothing inserted", jobs.AsQueueFull(err))
				}
				for _, r := range rs {
					if r.UniqueSkippedAsDuplicate {
						res.Duplicates++
					} else {
						res.Inserted++
					}
				}
				continue
			}
			first := &ch.rows
			n, err := b.ins.CopyFromTx(ctx, tx, func() (*jobs.CopyBatch, error) {
				if first != nil {
					rows := first
					first = nil
					return rows, nil
				}
				select {
				case next, ok := <-chunks:
					if !ok {
						return nil, nil
					}
					if next.unique {
						held = &next
						return nil, nil
					}
					return &next.rows, nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
			if err != nil {
				return fmt.Errorf("bulk: %w; nothing inserted", err)
			}
			res.Inserted += n
		}
		<-parseDone
		if parseErr != nil {
			return parseErr
		}
		return check.usageError()
	})
	cancel(err)
	<-parseDone
	if err != nil && copied {
		// The chunks copied before the failure were counted by their
		// queues' bounds, and a rollback does not give that back: the
		// recount does (package jobs, "Bounded queues"), or the leader's
		// within a minute if this one cannot have its lock.
		_ = jobs.RecountQueues(context.WithoutCancel(parent), pool, time.Second)
	}
	if err != nil {
		if parent.Err() != nil {
			return bulkResult{}, fmt.Errorf("bulk: interrupted; nothing inserted: %w", context.Cause(parent))
		}
		return bulkResult{}, err
	}
	return res, nil
}

// usageError is the error of a tally with invalid lines: the first one,
// and how many others.
func (v validation) usageError() error {
	switch {
	case v.invalid == 1:
		return &UsageError{Err: fmt.Errorf("%w; nothing inserted", v.first)}
	case v.invalid > 1:
		return &UsageError{Err: fmt.Errorf("%w (%d more invalid %s); nothing inserted", v.first, v.invalid-1, plural(v.invalid-1, "line", "lines"))}
	}
	return nil
}

// chunker gathers parsed lines, in input order, into chunks of at most
// batch jobs: a chunk holds lines all with or all without a unique key.
// Repeats of a unique key within one chunk are dropped and counted
// (InsertMany cannot upsert one key twice in a statement); repeats across
// chunks are caught by the database, in the same transaction.
type chunker struct {
	batch int
	out   chan<- bulkChunk
	ctx   context.Context
	cur   bulkChunk
	keys  map[string]int // a key's line in cur.params
}

// add takes a parsed block's jobs.
func (c *chunker) add(blk *lineBlock) error {
	for i, p := range blk.parsed {
		unique := p.uniqueKey != ""
		held := len(c.cur.params) + c.cur.rows.Len()
		if (unique != c.cur.unique && held > 0) || held >= c.batch || c.cur.bytes >= chunkBytes {
			if err := c.send(); err != nil {
				return err
			}
		}
		c.cur.unique = unique
		if unique {
			k := p.params.Args.Kind() + "\x00" + p.uniqueKey
			if p.debounced {
				k = "debounce\x00" + k
			}
			if at, seen := c.keys[k]; seen {
				if p.debounced {
					// A later line of a debounce key collapses into the
					// earlier: its args (and options) win.
					c.cur.params[at] = p.params
				}
				c.cur.dups++
				continue
			}
			c.keys[k] = len(c.cur.params)
			c.cur.params = append(c.cur.params, p.params)
		} else {
			c.cur.rows.Add(p.row)
		}
		c.cur.bytes += p.size
		blk.parsed[i] = parsedLine{} // the chunk holds it now
	}
	if !c.cur.unique {
		// The COPY takes rows as they come: hand them on at once.
		return c.send()
	}
	return nil
}

// send hands the current chunk on, if it holds anything.
func (c *chunker) send() error {
	if len(c.cur.params) == 0 && c.cur.rows.Len() == 0 && c.cur.dups == 0 {
		return nil
	}
	select {
	case c.out <- c.cur:
	case <-c.ctx.Done():
		return context.Cause(c.ctx)
	}
	c.cur = bulkChunk{}
	clear(c.keys)
	return nil
}
