package ferrycli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
)

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
