package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/outbox"
)

// queueInfo is one queue of `enqueue queues --json`.
type queueInfo struct {
	Queue     string           `json:"queue"`
	Counts    map[string]int64 `json:"counts"`
	Length    int64            `json:"length"`
	MaxLength *int64           `json:"max_length"`
	Workers   *int             `json:"workers"`
}

func listQueues(t *testing.T, url string) map[string]queueInfo {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, "queues", "--json")
	require.Zero(t, code, stderr)
	var qs []queueInfo
	require.NoError(t, json.Unmarshal([]byte(stdout), &qs), stdout)
	out := map[string]queueInfo{}
	for _, q := range qs {
		out[q.Queue] = q
	}
	return out
}

// TestWorker_QueueBounds: the config file's queues: and
// FERRY_QUEUE_MAX_LENGTH bound the queues at start, `enqueue queues` lists
// them, and inserts beyond a bound are refused.
func TestWorker_QueueBounds(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	// Jobs already there count once the queue is bounded.
	_, err := pool.Exec(context.Background(), `
		INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		SELECT '{}', 'ferry.noop', 25, 'reports', 'scheduled', now() + interval '1 day' FROM generate_series(1, 2)`)
	require.NoError(t, err)

	cfg := writeFile(t, "ferry.yaml", "queues:\n  - {name: reports, workers: 3, max_length: 3}\n  - {name: bulk, max_length: 0}\n")
	w := startWorker(t, url, []string{"FERRY_CONFIG=" + cfg, "FERRY_QUEUE_MAX_LENGTH=50", "FERRY_QUEUES=default=4"})
	require.Contains(t, w.Stderr(), "queues: bound changed", "logged before the worker started")

	qs := listQueues(t, url)
	require.NotNil(t, qs["reports"].MaxLength)
	require.EqualValues(t, 3, *qs["reports"].MaxLength)
	require.NotNil(t, qs["reports"].Workers)
	require.Equal(t, 3, *qs["reports"].Workers)
	require.EqualValues(t, 2, qs["reports"].Counts["scheduled"])
	require.EqualValues(t, 2, qs["reports"].Length)
	require.NotNil(t, qs["default"].MaxLength, "FERRY_QUEUE_MAX_LENGTH bounds every queue the worker works")
	require.EqualValues(t, 50, *qs["default"].MaxLength)
	require.Nil(t, qs["bulk"].MaxLength, "max_length: 0 is unbounded")

	enqueueID(t, url, "ferry.noop", "--queue", "reports", "--in", "1h")
	_, stderr, code := enqueue(t, url, nil, "job", "ferry.noop", "--queue", "reports", "--in", "1h")
	require.Equal(t, 3, code, stderr)
	require.Contains(t, stderr, "queue full")

	stdout, stderr, code := enqueue(t, url, nil, "queues")
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^reports\s+0\s+3\s+0\s+0\s+0\s+3\s+3\s+3$`, stdout)
	stop(t, w, 30*time.Second)
}

func TestWorker_QueueConfigErrors(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	for name, tc := range map[string]struct{ doc, want string }{
		"NegativeBound":  {"queues:\n  - {name: reports, max_length: -1}\n", `queues[0] (name "reports"): max_length: -1 is negative`},
		"TooManyWorkers": {"queues:\n  - {name: reports, workers: 100000}\n", `queues[0] (name "reports"): workers: 100000 is not between 1 and 10000`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			requireConfigRefused(t, url, tc.doc, tc.want)
		})
	}
	var n int
	require.NoError(t, pgtest.PoolFor(t, url).QueryRow(context.Background(), `SELECT count(*) FROM ferry_queue`).Scan(&n))
	require.Zero(t, n, "nothing written")
}

// requireConfigRefused starts `worker run` with the config file doc and
// requires it to exit 2 with one line that contains want.
func requireConfigRefused(t *testing.T, url, doc, want string) {
	t.Helper()
	cfg := writeFile(t, "ferry.yaml", doc)
	_, stderr, code := runWorker(t, env(url, "FERRY_CONFIG="+cfg), 15*time.Second, "run", "--admin-addr", "off")
	require.Equal(t, 2, code, stderr)
	require.Contains(t, oneLine(t, stderr), want)
}

// TestWorker_RouteWorkers: a route's `workers:` sets how many of its
// deliveries a worker runs at once, and a route without it takes the
// outbox count of FERRY_QUEUES; `enqueue queues` shows both. The receiver
// holds every request until the end, so each route's requests in flight
// reach its worker count and never pass it.
func TestWorker_RouteWorkers(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	var mu sync.Mutex
	inFlight, most := map[string]int{}, map[string]int{}
	release := make(chan struct{})
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		inFlight[r.URL.Path]++
		most[r.URL.Path] = max(most[r.URL.Path], inFlight[r.URL.Path])
		mu.Unlock()
		<-release
		mu.Lock()
		inFlight[r.URL.Path]--
		mu.Unlock()
	}))
	t.Cleanup(receiver.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})

	cfg := writeFile(t, "ferry.yaml", fmt.Sprintf(`outbox:
  routes:
    - {topic: t, name: narrow, url: "%[1]s/narrow", timeout: 2m, workers: 3}
    - {topic: t, name: plain, url: "%[1]s/plain", timeout: 2m}
`, receiver.URL))
	w := startWorker(t, url, []string{"FERRY_CONFIG=" + cfg, "FERRY_QUEUES=default=4,outbox=9"})

	qs := listQueues(t, url)
	for route, want := range map[string]int{"narrow": 3, "plain": 9} {
		q := qs[outbox.QueueFor(route)]
		require.NotNil(t, q.Workers, route)
		require.Equal(t, want, *q.Workers, route)
	}

	_, err := pool.Exec(context.Background(), `INSERT INTO ferry_outbox (topic, payload) SELECT 't', jsonb_build_object('i', i) FROM generate_series(1, 20) i`)
	require.NoError(t, err)
	snapshot := func() (map[string]int, map[string]int) {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(inFlight), maps.Clone(most)
	}
	require.Eventually(t, func() bool {
		now, _ := snapshot()
		return now["/narrow"] == 3 && now["/plain"] == 9
	}, 30*time.Second, 20*time.Millisecond, "each route's requests in flight reach its workers")
	// Several fetch rounds of both queues with work waiting (20 messages
	// each) and every worker busy: none may start a fourth or a tenth.
	time.Sleep(time.Second)
	_, most = snapshot()
	require.Equal(t, map[string]int{"/narrow": 3, "/plain": 9}, most)

	close(release)
	var delivered int
	require.Eventually(t, func() bool {
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM ferry_outbox_delivery WHERE status = 'delivered'`).Scan(&delivered)
		require.NoError(t, err)
		return delivered == 40
	}, 60*time.Second, 50*time.Millisecond)
	stop(t, w, 30*time.Second)
}
