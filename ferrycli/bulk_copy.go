package ferrycli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/schollz/progressbar/v3"

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
	if errors.Is(err, jobs.ErrQueueFull) {
		// The chunks copied before the refusal were counted by their
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
