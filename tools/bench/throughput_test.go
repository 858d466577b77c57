package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// A `worker run` process works a small backlog: the end probe sees it
// worked, the worker's /metrics counts every job (workerProcThroughput
// fails otherwise), and the probe's own load is measured on the backlog
// as it waits.
func TestWorkerProcThroughput(t *testing.T) {
	dir, bin, err := buildIntoTemp("./cmd/worker")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var load float64
	rate, err := workerProcThroughput(t.Context(), pgtest.ServerURL(), bin, 2000, &load)
	require.NoError(t, err)
	require.Positive(t, rate)
	require.Greater(t, load, 0.0, "the probe's load: no CPU counted")
	require.Less(t, load, 1.0)
}

// Bare River on River's own schema, counted by its completion events.
func TestBareRiverThroughput(t *testing.T) {
	rate, err := bareRiverThroughput(t.Context(), pgtest.ServerURL(), 2000, 100, riverBestCooldown, riverBestPoll, true)
	require.NoError(t, err)
	require.Positive(t, rate)
}

type failingArgs struct{}

func (failingArgs) Kind() string { return "bench.failing" }

type failingWorker struct {
	river.WorkerDefaults[failingArgs]
}

func (failingWorker) Work(context.Context, *river.Job[failingArgs]) error {
	return errors.New("no")
}

// A job that fails is an error of the count, not a job counted.
func TestCompletions_FailedJobIsAnError(t *testing.T) {
	pool, drop, err := scratchRiver(t.Context(), pgtest.ServerURL(), true)
	require.NoError(t, err)
	t.Cleanup(drop)
	workers := river.NewWorkers()
	river.AddWorker(workers, failingWorker{})
	rc, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}},
		Workers: workers, Logger: slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	_, err = rc.Insert(t.Context(), failingArgs{}, nil)
	require.NoError(t, err)
	done := countCompletions(rc, 1)
	require.NoError(t, rc.Start(t.Context()))
	t.Cleanup(func() { _ = rc.Stop(context.Background()) })
	_, err = done.wait(t.Context(), 1)
	require.ErrorContains(t, err, "job_failed")
}

// The worker's completed count is read from its /metrics; a scrape
// without it is an error, not zero jobs.
func TestCompletedOnMetrics(t *testing.T) {
	body := "# TYPE ferry_job_duration_seconds histogram\n" +
		`ferry_job_duration_seconds_count{kind="ferry.noop",outcome="completed"} 2000` + "\n" +
		`ferry_job_duration_seconds_count{kind="ferry.noop",outcome="failed"} 3` + "\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(body)) }))
	t.Cleanup(srv.Close)
	n, err := completedOnMetrics(t.Context(), srv.URL, jobs.NoopArgs{}.Kind())
	require.NoError(t, err)
	require.Equal(t, 2000, n)
	_, err = completedOnMetrics(t.Context(), srv.URL, "other.kind")
	require.ErrorContains(t, err, "no ferry_job_duration_seconds_count")
}

// The CPU clocks the harness reads: this process's, a process's from
// /proc, and the machine's, each moving with work done.
func TestCPUClocks(t *testing.T) {
	self0, err := selfCPU()
	require.NoError(t, err)
	proc0, err := procCPU(os.Getpid())
	require.NoError(t, err)
	machine0, err := machineCPU()
	require.NoError(t, err)
	// Spin until this process's own clock has counted 100 ms of CPU, however
	// long a loaded machine takes to give it that; the process's clock read
	// from /proc (in ticks of 10 ms) and the machine's must have counted it
	// too.
	self1 := self0
	for deadline := time.Now().Add(time.Minute); self1-self0 < 100*time.Millisecond; {
		require.True(t, time.Now().Before(deadline), "100 ms of CPU not counted in a minute")
		for end := time.Now().Add(10 * time.Millisecond); time.Now().Before(end); {
		}
		self1, err = selfCPU()
		require.NoError(t, err)
	}
	proc1, err := procCPU(os.Getpid())
	require.NoError(t, err)
	machine1, err := machineCPU()
	require.NoError(t, err)
	require.GreaterOrEqual(t, proc1-proc0, 50*time.Millisecond)
	require.GreaterOrEqual(t, machine1-machine0, 50*time.Millisecond)
	_, err = procCPU(-1)
	require.Error(t, err)
}
