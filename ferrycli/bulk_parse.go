package ferrycli

import (
	"context"
	"errors"
	"io"
	"runtime"
	"sync"
	"sync/atomic"
)

// A parser gets lines lineBlockSize at a time, or fewer when they add up
// to lineBlockBytes. The first blocks are smaller (firstBlockSize, then
// twice as many each time), so that the first rows reach the COPY early.
const (
	lineBlockSize  = 4096
	lineBlockBytes = 1 << 20
	firstBlockSize = 256
)

// blockLines is the most lines of the block at position seq.
func blockLines(seq int) int {
	if seq >= 4 {
		return lineBlockSize
	}
	return firstBlockSize << seq
}

// lineBlock is a run of lines copied out of the scanner's buffer, and,
// once parsed, what they hold.
type lineBlock struct {
	seq  int    // position in the input, from 0
	data []byte // the lines, end to end
	ends []int  // end of each line in data
	nums []int  // line numbers

	parsed []parsedLine // the valid lines' jobs, in order (none once a line is invalid)
	check  validation   // the block's tally
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

// validation tallies checked lines.
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
	if v.err == nil {
		v.err = o.err
	}
}

// parseInput reads r and parses its lines on one parser per CPU (at most
// eight), and hands the parsed blocks to ordered in input order, as long
// as every line so far is valid. Once a line is invalid, the parsers only
// check the lines that follow, to count them, and keep no job; the tally
// says so. A database error stops everything and is returned;
// so is ordered's error, or ctx's cause.
//
// At most twice as many blocks as parsers are read ahead of ordered, so
// memory stays bounded whatever the input's size.
func (b *bulk) parseInput(ctx context.Context, r io.Reader, ordered func(*lineBlock) error) (validation, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	parsers := min(runtime.GOMAXPROCS(0), 8)
	var (
		invalid atomic.Bool
		tokens  = make(chan struct{}, 2*parsers) // blocks read and not yet handed on
		blocks  = make(chan *lineBlock, parsers)
		parsed  = make(chan *lineBlock, parsers)
		wg      sync.WaitGroup
		scanErr error
	)
	send := func(ch chan<- *lineBlock, blk *lineBlock) error {
		select {
		case ch <- blk:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}

	// The reader gathers lines into blocks, so that a parser gets many
	// lines per channel operation.
	go func() {
		defer close(blocks)
		blk := &lineBlock{}
		next := func() error {
			select {
			case tokens <- struct{}{}:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if err := send(blocks, blk); err != nil {
				return err
			}
			blk = &lineBlock{seq: blk.seq + 1}
			return nil
		}
		err := scanLines(r, func(n int, line []byte) error {
			blk.add(n, line)
			if len(blk.nums) < blockLines(blk.seq) && len(blk.data) < lineBlockBytes {
				return nil
			}
			return next()
		})
		var le *lineError
		if errors.As(err, &le) { // a line too long ends the scan: one more invalid line
			blk.check.add(err)
			invalid.Store(true)
			err = nil
		}
		if err == nil && (len(blk.nums) > 0 || blk.check.invalid > 0) {
			err = next()
		}
		scanErr = err // read once blocks is closed
	}()

	for range parsers {
		wg.Go(func() {
			for blk := range blocks {
				blk.parsed = make([]parsedLine, 0, len(blk.nums))
				blk.each(func(n int, line []byte) {
					if blk.check.err != nil {
						return
					}
					p, err := b.parse(ctx, n, line)
					blk.check.add(err)
					switch {
					case blk.check.err != nil:
						cancel(blk.check.err)
					case err != nil:
						invalid.Store(true)
						blk.parsed = nil
					case !invalid.Load():
						blk.parsed = append(blk.parsed, p)
					}
				})
				if invalid.Load() {
					blk.parsed = nil
				} else if blk.check.err == nil {
					if err := b.encode(ctx, blk); err != nil {
						blk.check.err = err
						cancel(err)
					}
				}
				blk.data, blk.ends, blk.nums = nil, nil, nil
				if send(parsed, blk) != nil {
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(parsed) }()

	// Hand the blocks on in input order.
	var (
		total   validation
		pending = map[int]*lineBlock{}
		want    int
		err     error
	)
	for blk := range parsed {
		if err != nil {
			continue // drain
		}
		pending[blk.seq] = blk
		for next, ok := pending[want]; ok; next, ok = pending[want] {
			delete(pending, want)
			want++
			<-tokens
			total.merge(next.check)
			if total.err != nil {
				err = total.err
				cancel(err)
				break
			}
			if total.invalid > 0 {
				continue // counting only
			}
			if err = ordered(next); err != nil {
				cancel(err)
				break
			}
		}
	}
	if err != nil {
		return total, err
	}
	if scanErr != nil {
		return total, scanErr
	}
	return total, context.Cause(ctx)
}
