package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/jobs"
)

func TestNoopWorker_Work(t *testing.T) {
	t.Parallel()

	work := func(ctx context.Context, args jobs.NoopArgs) error {
		return (&jobs.NoopWorker{}).Work(ctx, &river.Job[jobs.NoopArgs]{JobRow: &rivertype.JobRow{ID: 1}, Args: args})
	}

	t.Run("Completes", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, work(t.Context(), jobs.NoopArgs{}))
	})

	t.Run("SleepCompletes", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		require.NoError(t, work(t.Context(), jobs.NoopArgs{Sleep: jobs.Duration(20 * time.Millisecond)}))
		require.GreaterOrEqual(t, time.Since(start), 20*time.Millisecond)
	})

	t.Run("SleepCancelledFails", func(t *testing.T) {
		t.Parallel()
		cause := errors.New("client stopping")
		ctx, cancel := context.WithCancelCause(t.Context())
		cancel(cause)
		start := time.Now()
		err := work(ctx, jobs.NoopArgs{Sleep: jobs.Duration(time.Hour)})
		require.Error(t, err)
		require.ErrorIs(t, err, cause)
		require.NotErrorIs(t, err, &rivertype.JobCancelError{}, "a cut sleep is retried, not cancelled")
		require.Contains(t, err.Error(), "sleep of 1h0m0s cut short")
		require.Less(t, time.Since(start), time.Minute, "the hour-long sleep was cut (a watchdog, not a measurement)")
	})

	t.Run("SleepTimedOutFails", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
		defer cancel()
		err := work(ctx, jobs.NoopArgs{Sleep: jobs.Duration(time.Hour)})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestDuration_UnmarshalJSON(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		in   string
		want time.Duration
	}{
		"String":          {`"1.5s"`, 1500 * time.Millisecond},
		"StringMinutes":   {`"10m"`, 10 * time.Minute},
		"Seconds":         {`30`, 30 * time.Second},
		"FractionSeconds": {`0.25`, 250 * time.Millisecond},
		"Zero":            {`0`, 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var d jobs.Duration
			require.NoError(t, json.Unmarshal([]byte(tc.in), &d))
			require.Equal(t, tc.want, time.Duration(d))
		})
	}

	for name, in := range map[string]string{
		"BadString":   `"soon"`,
		"NoUnit":      `"15"`,
		"EmptyString": `""`,
		"Bool":        `true`,
		"Object":      `{"s":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var d jobs.Duration
			err := json.Unmarshal([]byte(in), &d)
			require.Error(t, err)
			require.Contains(t, err.Error(), "duration")
		})
	}

	t.Run("NullLeavesZero", func(t *testing.T) {
		t.Parallel()
		var args jobs.NoopArgs
		require.NoError(t, json.Unmarshal([]byte(`{"sleep":null}`), &args))
		require.Zero(t, args.Sleep)
	})

	t.Run("InArgs", func(t *testing.T) {
		t.Parallel()
		var args jobs.HTTPRequestArgs
		require.NoError(t, json.Unmarshal([]byte(`{"url":"http://app.example","timeout":2}`), &args))
		require.Equal(t, 2*time.Second, time.Duration(args.Timeout))
	})
}

func TestDuration_MarshalJSON(t *testing.T) {
	t.Parallel()

	t.Run("GoString", func(t *testing.T) {
		t.Parallel()
		b, err := json.Marshal(jobs.Duration(1500 * time.Millisecond))
		require.NoError(t, err)
		require.JSONEq(t, `"1.5s"`, string(b))
	})

	t.Run("RoundTrip", func(t *testing.T) {
		t.Parallel()
		for _, d := range []time.Duration{0, time.Millisecond, 1500 * time.Millisecond, 90 * time.Minute, 10*time.Minute + 3*time.Nanosecond} {
			b, err := json.Marshal(jobs.NoopArgs{Sleep: jobs.Duration(d)})
			require.NoError(t, err)
			var back jobs.NoopArgs
			require.NoError(t, json.Unmarshal(b, &back), "%s", b)
			require.Equal(t, d, time.Duration(back.Sleep), "%s", b)
		}
	})

	t.Run("ZeroOmitted", func(t *testing.T) {
		t.Parallel()
		b, err := json.Marshal(jobs.NoopArgs{})
		require.NoError(t, err)
		require.JSONEq(t, `{}`, string(b))
	})
}
