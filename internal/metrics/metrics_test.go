package metrics

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

func TestOutcome(t *testing.T) {
	t.Parallel()
	require.Equal(t, "completed", outcome(nil))
	require.Equal(t, "failed", outcome(errors.New("boom")))
	require.Equal(t, "cancelled", outcome(river.JobCancel(errors.New("404"))))
	require.Equal(t, "snoozed", outcome(river.JobSnooze(0)))
	require.Equal(t, "failed", outcome(fmt.Errorf("wrapped: %w", context.Canceled)), "outcome alone cannot tell; Work checks the context")
}

func TestMiddleware_Outcomes(t *testing.T) {
	t.Parallel()
	m := New(nil, "test", nil)
	mw := m.Middleware().(*workMiddleware)
	job := &rivertype.JobRow{ID: 1, Kind: "k", Attempt: 1}

	require.NoError(t, mw.Work(context.Background(), job, func(context.Context) error { return nil }))
	boom := errors.New("boom")
	require.ErrorIs(t, mw.Work(context.Background(), job, func(context.Context) error { return boom }), boom)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, mw.Work(ctx, job, func(ctx context.Context) error { return fmt.Errorf("sleep cut short: %w", ctx.Err()) }))

	counts := map[string]uint64{}
	reg := prometheus.NewRegistry() // only the histogram: the jobs collector needs a pool
	reg.MustRegister(m.jobDuration)
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "ferry_job_duration_seconds" {
			continue
		}
		for _, metric := range f.GetMetric() {
			for _, l := range metric.GetLabel() {
				if l.GetName() == "outcome" {
					counts[l.GetValue()] += metric.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	require.Equal(t, map[string]uint64{"completed": 1, "failed": 1, "interrupted": 1}, counts)
}
