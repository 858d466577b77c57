// Package loop is the loop of ferry's periodic leader runnables: one pass
// now and one every interval, until the leader's term ends.
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
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}
