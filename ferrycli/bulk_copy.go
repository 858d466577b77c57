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

// insert reads the input once and inserts its jobs in one transaction:
// the lines are parsed on every core (parseInput) while the jobs parsed
// before them are copied, a chunk at a time, in input order. An invalid
// line stops the copying; the rest is still read, to count the invalid
// lines, and the transaction rolls back: nothing is inserted.
func (b *bulk) insert(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], r io.Reader) (bulkResult, error) {
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
	go func() {
		defer close(parseDone)
		defer close(chunks)
		c := chunker{batch: b.batch, out: chunks, ctx: ctx, keys: map[string]struct{}{}}
		check, parseErr = b.parseInput(ctx, r, c.add)
		if parseErr == nil && check.invalid == 0 {
			parseErr = c.send()
		}
	}()

	var res bulkResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for ch := range chunks {
			res.Duplicates += ch.dups
			copied = true
			if ch.unique {
				rs, err := client.InsertManyTx(ctx, tx, ch.params)
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
			} else {
				n, err := client.InsertManyFastTx(ctx, tx, ch.params)
				if err != nil {
					return fmt.Errorf("bulk: copy jobs: %w; nothing inserted", jobs.AsQueueFull(err))
				}
				res.Inserted += n
			}
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
	keys  map[string]struct{}
}

// add takes a parsed block's jobs.
func (c *chunker) add(blk *lineBlock) error {
	for i, p := range blk.parsed {
		unique := p.uniqueKey != ""
		if (unique != c.cur.unique && len(c.cur.params) > 0) || len(c.cur.params) >= c.batch || c.cur.bytes >= chunkBytes {
			if err := c.send(); err != nil {
				return err
			}
		}
		if c.cur.params == nil {
			c.cur.params = make([]river.InsertManyParams, 0, c.batch)
		}
		c.cur.unique = unique
		if unique {
			k := p.params.Args.Kind() + "\x00" + p.uniqueKey
			if _, seen := c.keys[k]; seen {
				c.cur.dups++
				continue
			}
			c.keys[k] = struct{}{}
		}
		c.cur.params = append(c.cur.params, p.params)
		c.cur.bytes += p.size
		blk.parsed[i] = parsedLine{} // the chunk holds it now
	}
	return nil
}

// send hands the current chunk on, if it holds anything.
func (c *chunker) send() error {
	if len(c.cur.params) == 0 && c.cur.dups == 0 {
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
