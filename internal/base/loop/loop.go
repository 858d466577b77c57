// Package loop is the loop of ferry's periodic leader runnables: one pass
// now and one every interval, until the leader's term ends; and the wait
// it is made of (Sleep), for any loop that waits on a context.
package loop

import (
	"context"
	"time"
)

// Every runs once now and then every every (timed from the end of a pass),
// until ctx ends, when it returns nil. A pass that fails while ctx lives
// returns its error, so that the elector runs the runnable again after a
// backoff; one that fails because ctx ended returns nil.
func Every(ctx context.Context, every time.Duration, once func(context.Context) error) error {
	for {
		if err := once(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if Sleep(ctx, every) != nil {
			return nil
		}
	}
}

// Sleep waits d (nothing when d <= 0) and returns nil, or returns ctx's
// cause as soon as ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
