package jobs_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// clientBundle is a River client started for one test, working a queue of its
// own so that it never takes jobs inserted by another test.
type clientBundle struct {
	client *river.Client[pgx.Tx]
	queue  string
	events <-chan *river.Event
}

var queueSeq atomic.Int64

// neverRetrySoon schedules a failed job's next attempt an hour away, so the
// job stays retryable for the rest of the test. (River's default policy
// retries a first failure after about a second, and because that is within
// the scheduler interval it marks the job available rather than retryable.)
type neverRetrySoon struct{}

func (neverRetrySoon) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Hour) }

// startClient starts a River client on pool with workers and middleware,
// working a fresh queue, and stops it when the test ends.
func startClient(t *testing.T, pool *pgxpool.Pool, workers *river.Workers, middleware ...rivertype.Middleware) *clientBundle {
	t.Helper()
	queue := fmt.Sprintf("test_%d", queueSeq.Add(1))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Middleware:        middleware,
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: 10}},
		RetryPolicy:       neverRetrySoon{},
		TestOnly:          true,
		Workers:           workers,
	})
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	t.Cleanup(cancel)
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return &clientBundle{client: client, queue: queue, events: events}
}

// run inserts args into the bundle's queue and waits for the job's first
// attempt to end, returning the job as stored afterwards.
func (b *clientBundle) run(t *testing.T, args river.JobArgs) (*river.Event, *rivertype.JobRow) {
	t.Helper()
	ctx := t.Context()
	res, err := b.client.Insert(ctx, args, &river.InsertOpts{Queue: b.queue})
	require.NoError(t, err)
	timeout := time.After(time.Minute) // a watchdog: the attempt ends in milliseconds
	for {
		select {
		case ev := <-b.events:
			if ev.Job.ID != res.Job.ID {
				continue
			}
			job, err := b.client.JobGet(ctx, res.Job.ID)
			require.NoError(t, err)
			return ev, job
		case <-timeout:
			t.Fatalf("job %d (%s) did not finish an attempt within 10s", res.Job.ID, args.Kind())
		}
	}
}

// examplePool stands for the service's own pool in runnable examples
// (which get no *testing.T): here, on this package's test database.
func examplePool() *pgxpool.Pool { return pgtest.ExamplePool() }
