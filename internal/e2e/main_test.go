package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	// startTimeout bounds a worker's start, migrations included.
	startTimeout = 20 * time.Second
	// stopTimeout bounds a worker's exit after SIGTERM when no job runs.
	stopTimeout = 10 * time.Second
	// pollEvery is the pace of the database polls that no log line can
	// replace.
	pollEvery = 50 * time.Millisecond
)

type binaries struct{ worker, enqueue string }

// bins builds the worker and enqueue binaries (once per test process).
func bins(t *testing.T) binaries {
	t.Helper()
	b := proctest.Build(t, "./cmd/worker", "./cmd/enqueue")
	return binaries{worker: b["./cmd/worker"], enqueue: b["./cmd/enqueue"]}
}

// env is the environment of a ferry process on database url: JSON logs, so
// tests can read them, and extra (NAME=value, later entries win).
func env(url string, extra ...string) []string {
	return append([]string{"DATABASE_URL=" + url, "FERRY_LOG_FORMAT=json"}, extra...)
}

// enqueue runs `enqueue args…` on database url.
func enqueue(t *testing.T, url string, stdin io.Reader, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	return proctest.Run(t, bins(t).enqueue, env(url), stdin, args...)
}

// enqueueID runs `enqueue job args…`, requires success, and returns the
// printed job id.
func enqueueID(t *testing.T, url string, args ...string) int64 {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, append([]string{"job"}, args...)...)
	require.Zero(t, code, "enqueue failed: %s", stderr)
	id, err := strconv.ParseInt(strings.TrimSpace(stdout), 10, 64)
	require.NoError(t, err, "enqueue printed %q", stdout)
	return id
}

// migrate runs `worker migrate args…` on database url and requires success.
func migrate(t *testing.T, url string, args ...string) string {
	t.Helper()
	stdout, stderr, code := proctest.Run(t, bins(t).worker, env(url), nil, append([]string{"migrate"}, args...)...)
	require.Zero(t, code, "worker migrate %s: %s", strings.Join(args, " "), stderr)
	require.Empty(t, stderr)
	return stdout
}

// startWorker starts `worker run` on database url with an admin server on a
// free loopback port, and waits for its "ferry: started" line.
func startWorker(t *testing.T, url string, extraEnv []string, args ...string) *proctest.Proc {
	t.Helper()
	args = append([]string{"run", "--admin-addr", "127.0.0.1:0"}, args...)
	p := proctest.Start(t, bins(t).worker, env(url, extraEnv...), args...)
	_, err := p.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)
	return p
}

// stop sends SIGTERM and requires exit code 0 within timeout.
func stop(t *testing.T, p *proctest.Proc, timeout time.Duration) {
	t.Helper()
	require.NoError(t, p.Signal(syscall.SIGTERM))
	code, err := p.Wait(timeout)
	require.NoError(t, err)
	require.Zero(t, code, "worker exit code after SIGTERM; stderr:\n%s", p.Stderr())
}

// oneLine requires s to be exactly one newline-terminated line and returns it.
func oneLine(t *testing.T, s string) string {
	t.Helper()
	require.True(t, strings.HasSuffix(s, "\n") && strings.Count(s, "\n") == 1, "want exactly one line, got %q", s)
	return strings.TrimSuffix(s, "\n")
}

// lastLine is the last line of s: a process's final word.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// job is what the tests read back from river_job.
type job struct {
	Kind        string
	Queue       string
	State       string
	Attempt     int
	MaxAttempts int
	Priority    int
	Errors      int // length of the errors array
	Args        map[string]any
	Tags        []string
	ScheduledIn time.Duration // scheduled_at - now()
	Finalized   bool
}

func getJob(t *testing.T, pool *pgxpool.Pool, id int64) job {
	t.Helper()
	var (
		j    job
		args []byte
		in   float64
	)
	err := pool.QueryRow(context.Background(), `
		SELECT kind, queue, state::text, attempt, max_attempts, priority,
		       coalesce(array_length(errors, 1), 0), args, tags,
		       extract(epoch FROM scheduled_at - now()), finalized_at IS NOT NULL
		FROM river_job WHERE id = $1`, id).
		Scan(&j.Kind, &j.Queue, &j.State, &j.Attempt, &j.MaxAttempts, &j.Priority, &j.Errors, &args, &j.Tags, &in, &j.Finalized)
	require.NoError(t, err, "read job %d", id)
	require.NoError(t, json.Unmarshal(args, &j.Args))
	j.ScheduledIn = time.Duration(in * float64(time.Second))
	return j
}

// waitJobState polls river_job every pollEvery until job id is in state, and
// returns it. A log line says when a worker finished a job, but River records
// the state a moment later, in a batch; and no line says a job has started.
func waitJobState(t *testing.T, pool *pgxpool.Pool, id int64, state string, timeout time.Duration) job {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		j := getJob(t, pool, id)
		if j.State == state {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s, not %s, after %s", id, j.State, state, timeout)
		}
		time.Sleep(pollEvery)
	}
}

func countJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM river_job").Scan(&n))
	return n
}
