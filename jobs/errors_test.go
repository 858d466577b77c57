package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// personalArgs is a kind whose worker fails with personal data in its
// error, or panics with it, or cancels with it.
type personalArgs struct {
	Mode string `json:"mode"` // error, panic, cancel, long
}

func (personalArgs) Kind() string { return "test.personal" }

type personalWorker struct {
	river.WorkerDefaults[personalArgs]
}

const personal = "patient Jane Roe, born 1970-01-01"

func (personalWorker) Work(_ context.Context, job *river.Job[personalArgs]) error {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New(personal)}
	switch job.Args.Mode {
	case "panic":
		panic("bad record: " + personal)
	case "cancel":
		return river.JobCancel(fmt.Errorf("refused: %w", opErr))
	case "long":
		return errors.New(strings.Repeat("é", jobs.MaxErrorBytes))
	}
	return fmt.Errorf("send reminder: %w", opErr)
}

// TestErrorMiddleware: River stores only the type of a sensitive kind's
// error, panic or cancellation, and a bounded message of any other kind's.
func TestErrorMiddleware(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)

	start := func(t *testing.T, opts ...jobs.KindOption) *clientBundle {
		t.Helper()
		reg := &jobs.Registry{}
		require.NoError(t, reg.Add(jobs.Define[personalArgs](personalWorker{}, "", "test", opts...)))
		workers, err := reg.Workers()
		require.NoError(t, err)
		return startClient(t, pool, workers, jobs.ErrorMiddleware(reg.Sensitive))
	}

	t.Run("Sensitive", func(t *testing.T) {
		t.Parallel()
		b := start(t, jobs.SensitiveErrors())
		for mode, want := range map[string]struct {
			state rivertype.JobState
			err   string
		}{
			"error":  {rivertype.JobStateRetryable, "*net.OpError: message withheld: the kind's errors are sensitive"},
			"panic":  {rivertype.JobStateRetryable, "panic string: message withheld: the kind's errors are sensitive"},
			"cancel": {rivertype.JobStateCancelled, "JobCancelError: *net.OpError: message withheld: the kind's errors are sensitive"},
		} {
			_, job := b.run(t, personalArgs{Mode: mode})
			require.Equal(t, want.state, job.State, mode)
			require.Len(t, job.Errors, 1)
			require.Equal(t, want.err, job.Errors[0].Error, mode)
			require.Empty(t, job.Errors[0].Trace, mode)
		}
	})

	t.Run("NotSensitive", func(t *testing.T) {
		t.Parallel()
		b := start(t)
		_, job := b.run(t, personalArgs{Mode: "error"})
		require.Contains(t, job.Errors[0].Error, personal, "an ordinary kind's message is kept")
		_, job = b.run(t, personalArgs{Mode: "long"})
		msg := job.Errors[0].Error
		require.LessOrEqual(t, len(msg), jobs.MaxErrorBytes)
		require.True(t, strings.HasSuffix(msg, "bytes cut)"), msg)
		require.True(t, strings.HasPrefix(msg, "éé"))
	})
}

// TestErrorMiddleware_KeepsChain: the rewritten error still unwraps to the
// worker's, so River and ferry see a cancelled context or a cancellation
// as before.
func TestErrorMiddleware_KeepsChain(t *testing.T) {
	t.Parallel()
	mw := jobs.ErrorMiddleware(func(string) bool { return true }).(rivertype.WorkerMiddleware)
	job := &rivertype.JobRow{Kind: "k"}
	err := mw.Work(t.Context(), job, func(context.Context) error { return fmt.Errorf("stopped: %w", context.Canceled) })
	require.ErrorIs(t, err, context.Canceled)
	require.NotContains(t, err.Error(), "stopped")
	var stored *jobs.StoredError
	require.ErrorAs(t, err, &stored)
	require.True(t, stored.Sensitive)

	snooze := river.JobSnooze(time.Minute)
	require.Equal(t, snooze, mw.Work(t.Context(), job, func(context.Context) error { return snooze }))
	require.NoError(t, mw.Work(t.Context(), job, func(context.Context) error { return nil }))
}
