package loop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestEvery(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := 0
	err := Every(ctx, time.Millisecond, func(context.Context) error {
		passes++
		if passes == 3 {
			cancel()
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, passes)

	boom := errors.New("boom")
	require.ErrorIs(t, Every(context.Background(), time.Hour, func(context.Context) error { return boom }), boom)

	ctx, cancel = context.WithCancel(context.Background())
	require.NoError(t, Every(ctx, time.Hour, func(context.Context) error { cancel(); return boom }), "a pass failing as its context ends is no failure")
}

func TestSleep(t *testing.T) {
	t.Parallel()
	require.NoError(t, Sleep(context.Background(), time.Millisecond), "the full wait")
	require.NoError(t, Sleep(context.Background(), 0))
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("demoted")
	go func() { time.Sleep(10 * time.Millisecond); cancel(cause) }()
	require.ErrorIs(t, Sleep(ctx, time.Hour), cause, "the context's cause, at once")
	require.ErrorIs(t, Sleep(ctx, 0), context.Canceled, "an ended context, even for no wait")
}
