package logging_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logattr"
	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/logging"
	"github.com/ferryq/ferry/internal/metrics"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNew(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := logging.New(&buf, "auto", "info")
	require.NoError(t, err)
	l.Info("election: leader acquired", "term", 3)
	l.Debug("hidden")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "auto on a non-terminal is JSON: %s", buf.String())
	require.Equal(t, "election: leader acquired", rec["msg"])
	require.EqualValues(t, 3, rec["term"])

	buf.Reset()
	l, err = logging.New(&buf, "text", "debug")
	require.NoError(t, err)
	l.Debug("job: completed", "job_id", 7)
	require.Contains(t, buf.String(), "job: completed")
	require.Contains(t, buf.String(), "job_id=7")
	require.NotContains(t, buf.String(), "\x1b[", "no colour when not a terminal")

	_, err = logging.New(&buf, "xml", "info")
	require.ErrorContains(t, err, `log format "xml"`)
	_, err = logging.New(&buf, "json", "loud")
	require.ErrorContains(t, err, `log level "loud"`)
}

// Every format writes a duration as a Go duration string, at the top
// level, in a group and in attributes bound with With.
func TestNew_DurationsAreStrings(t *testing.T) {
	t.Parallel()
	logDurations := func(l *slog.Logger) {
		l.With("grace", 25*time.Second).Info("election: standby",
			"probe", time.Minute, "took", 1500*time.Microsecond, slog.Group("lease", "tick", 15*time.Second), "count", 3)
	}

	var buf bytes.Buffer
	l, err := logging.New(&buf, "json", "info")
	require.NoError(t, err)
	logDurations(l)
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
	require.Equal(t, "1m0s", rec["probe"])
	require.Equal(t, "1.5ms", rec["took"])
	require.Equal(t, "25s", rec["grace"])
	require.Equal(t, map[string]any{"tick": "15s"}, rec["lease"])
	require.EqualValues(t, 3, rec["count"], "other numbers stay numbers")

	buf.Reset()
	l, err = logging.New(&buf, "text", "info")
	require.NoError(t, err)
	logDurations(l)
	for _, want := range []string{"probe=1m0s", "took=1.5ms", "grace=25s", "lease.tick=15s", "count=3"} {
		require.Contains(t, buf.String(), want)
	}

	// A test's recorder writes what production writes.
	logs := &logtest.Recorder{}
	logDurations(logs.Logger())
	require.Equal(t, "1m0s", logs.Find(t, "election: standby")["probe"])
}

// failWorker fails every attempt.
type failArgs struct{}

func (failArgs) Kind() string { return "logging.fail" }

type failWorker struct {
	river.WorkerDefaults[failArgs]
}

func (failWorker) Work(context.Context, *river.Job[failArgs]) error {
	return errors.New("the receiver said no")
}

// retryNow makes a failed attempt available again at once.
type retryNow struct{}

func (retryNow) NextRetry(*rivertype.JobRow) time.Time { return time.Now() }

// riverRecords returns the records of logs whose message ends with suffix
// (River prefixes its messages with the name of the service).
func riverRecords(logs *logtest.Recorder, suffix string) []map[string]any {
	var out []map[string]any
	for line := range strings.Lines(logs.String()) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			if msg, _ := rec["msg"].(string); strings.HasSuffix(msg, suffix) {
				out = append(out, rec)
			}
		}
	}
	return out
}

// A real River client, with River's logger made by River and ferry's
// worker middleware, against Postgres: River's info records are written
// at debug level, a failed attempt is logged once (ferry's "job: failed"),
// and a logger at info level gets no River chatter at all.
func TestRiver_RealClient(t *testing.T) {
	t.Parallel()
	const watchdog = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), watchdog)
	defer cancel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))

	debugLogs, infoLogs := &logtest.Recorder{}, &logtest.Recorder{}
	base := slog.New(slog.NewMultiHandler(
		slog.NewJSONHandler(debugLogs, &slog.HandlerOptions{Level: slog.LevelDebug, ReplaceAttr: logattr.Replace}),
		slog.NewJSONHandler(infoLogs, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: logattr.Replace}),
	))
	workers := river.NewWorkers()
	river.AddWorker(workers, failWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Logger:      logging.River(base),
		Middleware:  []rivertype.Middleware{metrics.New(pool, "test", base).Middleware()},
		Queues:      map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		RetryPolicy: retryNow{},
		Workers:     workers,
	})
	require.NoError(t, err)
	failed, unsubscribe := client.Subscribe(river.EventKindJobFailed)
	defer unsubscribe()
	require.NoError(t, client.Start(ctx))
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			require.NoError(t, client.Stop(context.WithoutCancel(ctx)))
		}
	}
	t.Cleanup(stop)

	res, err := client.Insert(ctx, failArgs{}, &river.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	for attempt := 1; attempt <= 2; attempt++ {
		select {
		case ev := <-failed:
			require.Equal(t, res.Job.ID, ev.Job.ID)
		case <-ctx.Done():
			t.Fatalf("attempt %d of job %d did not fail within the watchdog", attempt, res.Job.ID)
		}
	}
	// River reports its producer's counts every few seconds once they
	// change (they did: two attempts ran).
	for len(riverRecords(debugLogs, ": Producer job counts")) == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("River logged no producer job counts within the watchdog")
		case <-time.After(50 * time.Millisecond):
		}
	}
	stop()

	// One line per failed attempt: ferry's, with its fields.
	fails := debugLogs.All("job: failed")
	require.Len(t, fails, 2, debugLogs.String())
	for i, rec := range fails {
		require.Equal(t, "WARN", rec["level"])
		require.EqualValues(t, i+1, rec["attempt"])
		require.EqualValues(t, res.Job.ID, rec["job_id"])
		require.Equal(t, "the receiver said no", rec["error"])
		d, err := time.ParseDuration(rec["duration"].(string))
		require.NoError(t, err, "the duration is a Go duration string")
		require.Positive(t, d)
	}
	for _, dup := range []string{": Job errored", ": Job errored; retrying"} {
		require.Empty(t, riverRecords(debugLogs, dup), "River's duplicate %q is dropped", dup)
	}

	// River's info records, at debug level.
	for _, msg := range []string{": Producer job counts", "River client started", "River client stopped"} {
		recs := riverRecords(debugLogs, msg)
		require.NotEmpty(t, recs, msg)
		for _, rec := range recs {
			require.Equal(t, "DEBUG", rec["level"], msg)
		}
		require.Empty(t, riverRecords(infoLogs, msg), "an info logger does not get %q", msg)
	}
	require.Len(t, infoLogs.All("job: failed"), 2, "ferry's own warnings reach the info logger")
}

// River's warnings and errors keep their level; its debug records are
// dropped, whatever the logger's level.
func TestRiver_Levels(t *testing.T) {
	t.Parallel()
	logs := &logtest.Recorder{}
	l := logging.River(logs.Logger()).With("component", "river")
	l.Debug("producer: fetched nothing")
	l.Warn("notifier: connection lost")
	l.Error("jobexecutor.JobExecutor: panic recovery; possible bug with Worker", "job_id", 1)
	l.Info("jobexecutor.JobExecutor: Job panicked", "job_id", 1)
	require.Empty(t, logs.All("producer: fetched nothing"))
	require.Empty(t, logs.All("jobexecutor.JobExecutor: Job panicked"), "the error line says it")
	require.Equal(t, "WARN", logs.Find(t, "notifier: connection lost")["level"])
	rec := logs.Find(t, "jobexecutor.JobExecutor: panic recovery; possible bug with Worker")
	require.Equal(t, "ERROR", rec["level"])
	require.Equal(t, "river", rec["component"])
}
