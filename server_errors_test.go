package ferry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

type secretFailArgs struct{}

func (secretFailArgs) Kind() string { return "test.secret_fail" }

type secretFailWorker struct {
	river.WorkerDefaults[secretFailArgs]
}

const secretMessage = "card 4111 1111 1111 1111 declined"

func (secretFailWorker) Work(context.Context, *river.Job[secretFailArgs]) error {
	return river.JobCancel(errors.New(secretMessage))
}

// TestServer_SensitiveErrors: a kind defined with jobs.SensitiveErrors has
// neither its log line nor its dead letter hold its error's message.
func TestServer_SensitiveErrors(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	logs := &logtest.Recorder{}
	cfg := quietConfig(url)
	cfg.Logger = logs.Logger()
	cfg.Queues.Workers = map[string]int{"secret": 1}
	cfg.Kinds = []jobs.Kind{jobs.Define[secretFailArgs](secretFailWorker{}, "secret", "fails with a card number", jobs.SensitiveErrors())}
	srv, err := ferry.New(t.Context(), cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)

	res, err := srv.River().Insert(t.Context(), secretFailArgs{}, &river.InsertOpts{Queue: "secret"})
	require.NoError(t, err)
	var state, stored string
	require.Eventually(t, func() bool {
		require.NoError(t, srv.Pool().QueryRow(t.Context(),
			`SELECT state::text, coalesce(errors[1]->>'error', '') FROM river_job WHERE id = $1`, res.Job.ID).Scan(&state, &stored))
		return state == "cancelled"
	}, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())

	require.Equal(t, "JobCancelError: *errors.errorString: message withheld: the kind's errors are sensitive", stored)
	require.NotEmpty(t, logs.All("job: cancelled"), "the failure is logged")
	// The card number as written, with its spaces: a bare "4111" also
	// turns up in the logs' nanosecond timestamps now and then.
	require.NotContains(t, logs.String(), "4111 1111", "nor logged")
	require.NotContains(t, logs.String(), "declined", "nor logged")
}
