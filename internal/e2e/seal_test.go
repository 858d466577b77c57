package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
	"github.com/ferryq/ferry/seal"
)

// Sealed jobs with real processes: a worker with FERRY_SEAL_KEYS works the
// http.request jobs `enqueue job` sealed (with its key, or the key it
// rotates out), and refuses every planted, altered, moved, copied or stale
// one: discarded with a `ferry: seal:` error, logged, counted, visible in
// /readyz, and its request never sent.

// effects is an HTTP server that counts the requests of http.request jobs
// by path: a job's effect.
type effects struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func newEffects(t *testing.T) *effects {
	e := &effects{hits: map[string]int{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.hits[r.URL.Path]++
		e.mu.Unlock()
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *effects) snapshot() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for k, v := range e.hits {
		out[k] = v
	}
	return out
}

func sealKey(*testing.T) string { return seal.GenerateKey() }

func TestSeal(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	fx := newEffects(t)
	oldKey, newKey := sealKey(t), sealKey(t)
	workerKeys := "FERRY_SEAL_KEYS=" + newKey + "," + oldKey

	w := startWorker(t, url, append(debug, workerKeys), "--queues", "default=4,other=2")
	started, err := w.WaitForLineFunc(0, logtest.Logged("ferry: started"))
	require.NoError(t, err)
	var startRec struct {
		AdminAddr string `json:"admin_addr"`
	}
	require.NoError(t, json.Unmarshal([]byte(started), &startRec))
	_, err = w.WaitForLineFunc(0, logtest.Logged("seal: jobs are sealed and verified", "unsealed_waiting", 0))
	require.NoError(t, err)
	// The first worker with keys on a fresh database arms it: run ids are
	// claimed as jobs are written, which the replayed cases below need.
	_, err = w.WaitForLineFunc(0, logtest.Logged("seal: the database now claims the run ids of sealed jobs as they are written"))
	require.NoError(t, err)

	// enqueueSealed runs `enqueue job http.request` to path with key (and
	// more NAME=value lines after it).
	enqueueSealed := func(key, path string, extra ...string) int64 {
		t.Helper()
		args := append([]string{"job", "http.request", "--args", fmt.Sprintf(`{"url": %q}`, fx.srv.URL+path)}, extra...)
		stdout, stderr, code := proctest.Run(t, bins(t).enqueue, env(url, strings.Split("FERRY_SEAL_KEYS="+key, "\n")...), nil, args...)
		require.Zero(t, code, stderr)
		var id int64
		_, err := fmt.Sscan(strings.TrimSpace(stdout), &id)
		require.NoError(t, err, stdout)
		return id
	}
	// copyOf writes a copy of job id back to river_job with set applied
	// (an UPDATE's SET list, or "") and returns its id.
	copyOf := func(id int64, set string) int64 {
		t.Helper()
		// One transaction: no worker sees the copy before it is altered.
		tx, err := pool.Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		var copyID int64
		require.NoError(t, tx.QueryRow(t.Context(), `
			INSERT INTO river_job (args, kind, max_attempts, metadata, queue, priority, state, tags)
			SELECT args, kind, max_attempts, metadata, queue, priority, 'available', tags FROM river_job WHERE id = $1
			RETURNING id`, id).Scan(&copyID))
		if set != "" {
			_, err := tx.Exec(t.Context(), "UPDATE river_job SET "+set+" WHERE id = $1", copyID)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(t.Context()))
		return copyID
	}
	requireRefused := func(id int64, reason string) {
		t.Helper()
		_, err := w.WaitForLineFunc(10*time.Second, logtest.Logged("seal: job refused", "job_id", id, "kind", "http.request", "reason", reason))
		require.NoError(t, err)
		j := waitJobState(t, pool, id, "discarded", 5*time.Second)
		require.Equal(t, 1, j.Errors, "discarded at its first attempt, never retried")
		var last string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT errors[array_length(errors, 1)]->>'error' FROM river_job WHERE id = $1`, id).Scan(&last))
		require.True(t, strings.HasPrefix(last, "ferry: seal: job refused ("+reason+")"), last)
	}

	// Sealed with the new key, and with the old one it still verifies.
	sealed := enqueueSealed(newKey, "/sealed")
	// Encrypted: stored as an envelope, worked with the args as given.
	encrypted := enqueueSealed(newKey+"\nFERRY_SEAL_ENCRYPT=true", "/encrypted")
	waitJobState(t, pool, encrypted, "completed", 10*time.Second)
	var storedArgs string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT args::text FROM river_job WHERE id = $1`, encrypted).Scan(&storedArgs))
	require.Contains(t, storedArgs, "ferry_sealed")
	require.NotContains(t, storedArgs, "/encrypted")
	waitJobState(t, pool, sealed, "completed", 10*time.Second)
	rotated := enqueueSealed(oldKey, "/rotated")
	waitJobState(t, pool, rotated, "completed", 10*time.Second)

	// A job planted with plain SQL.
	var planted int64
	require.NoError(t, pool.QueryRow(t.Context(), `
		INSERT INTO river_job (args, kind, max_attempts, queue, priority, state)
		VALUES (jsonb_build_object('url', $1::text), 'http.request', 25, 'default', 1, 'available')
		RETURNING id`, fx.srv.URL+"/planted").Scan(&planted))
	requireRefused(planted, "missing")

	requireRefused(copyOf(sealed, ""), "replayed")
	// Written back under the original's own id once River's cleaner (here
	// a DELETE) removed it: the claim is gone, the copy refused.
	orig, err := pool.Exec(t.Context(), `
		WITH gone AS (DELETE FROM river_job WHERE id = $1 RETURNING *)
		INSERT INTO river_job (id, args, kind, max_attempts, metadata, queue, priority, state, tags)
		SELECT id, args, kind, max_attempts, metadata, queue, priority, 'available', tags FROM gone`, rotated)
	require.NoError(t, err)
	require.EqualValues(t, 1, orig.RowsAffected())
	requireRefused(rotated, "replayed")
	requireRefused(copyOf(sealed, fmt.Sprintf(`args = jsonb_build_object('url', '%s/altered')`, fx.srv.URL)), "invalid")
	requireRefused(copyOf(sealed, `queue = 'other'`), "queue")
	requireRefused(enqueueSealed(newKey, "/stale", "--at", time.Now().Add(-200*time.Hour).UTC().Format(time.RFC3339)), "stale")
	// Sealed with a key the worker does not have.
	requireRefused(enqueueSealed(sealKey(t), "/foreign"), "invalid")

	// Nothing refused ran its effect; the sealed jobs ran once each.
	require.Equal(t, map[string]int{"/sealed": 1, "/rotated": 1, "/encrypted": 1}, fx.snapshot())

	// /readyz says an unsealed job arrived; /metrics counts the refusals.
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + startRec.AdminAddr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	code, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, "seal: 1 jobs refused for a missing seal")
	_, body = get("/metrics")
	for reason, n := range map[string]int{"missing": 1, "replayed": 2, "invalid": 2, "queue": 1, "stale": 1} {
		require.Contains(t, body, fmt.Sprintf(`ferry_seal_refused_total{reason=%q} %d`, reason, n))
	}

	stop(t, w, stopTimeout)
	for _, key := range []string{oldKey, newKey} {
		require.NotContains(t, w.Stderr()+w.Stdout(), key, "a key is never logged")
		require.NotContains(t, body, key)
	}
}

func TestSeal_Config(t *testing.T) {
	t.Parallel()

	t.Run("BadKeyExits2", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		short := base64.StdEncoding.EncodeToString([]byte("too short a key"))
		stdout, stderr, code := proctest.Run(t, bins(t).worker, env(url, "FERRY_SEAL_KEYS="+sealKey(t)+","+short), nil, "run", "--admin-addr", "off")
		require.Equal(t, 2, code, stderr)
		require.Empty(t, stdout)
		line := oneLine(t, stderr)
		require.Contains(t, line, "FERRY_SEAL_KEYS: key 2 of 2 decodes to 15 bytes")
		require.NotContains(t, line, short)
	})

	t.Run("EncryptWithoutKeysExits2", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		_, stderr, code := proctest.Run(t, bins(t).worker, env(url, "FERRY_SEAL_ENCRYPT=true"), nil, "run", "--admin-addr", "off")
		require.Equal(t, 2, code, stderr)
		require.Contains(t, oneLine(t, stderr), "seal encrypt needs seal keys")
	})

	t.Run("EnqueueBadKeyExits2", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		short := base64.StdEncoding.EncodeToString([]byte("too short a key"))
		stdout, stderr, code := proctest.Run(t, bins(t).enqueue, env(url, "FERRY_SEAL_KEYS="+short), nil, "job", "ferry.noop")
		require.Equal(t, 2, code, stderr)
		require.Empty(t, stdout)
		line := oneLine(t, stderr)
		require.Contains(t, line, "FERRY_SEAL_KEYS: key 1 of 1 decodes to 15 bytes")
		require.NotContains(t, line, short)
		pool := pgtest.PoolFor(t, url)
		require.Zero(t, countJobs(t, pool), "nothing inserted")
	})

	t.Run("UnsealedWaitingAtStart", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		// An inserter without keys beside workers with keys.
		enqueueID(t, url, "ferry.noop")
		enqueueID(t, url, "ferry.noop")
		w := startWorker(t, url, []string{"FERRY_SEAL_KEYS=" + sealKey(t)})
		_, err := w.WaitForLineFunc(0, logtest.Logged("seal: unsealed jobs are waiting and will be refused; an inserter runs without FERRY_SEAL_KEYS, or jobs were planted", "unsealed_waiting", 2))
		require.NoError(t, err)
		stop(t, w, stopTimeout)
	})

	t.Run("NoKeysWarns", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		w := startWorker(t, url, nil)
		_, err := w.WaitForLineFunc(0, logtest.Logged("seal: jobs are not sealed; whoever can write river_job can run any registered kind with any args"))
		require.NoError(t, err)
		stop(t, w, stopTimeout)
	})
}

// TestSeal_SchedulerAndRelay: the jobs that ferry itself inserts, a
// schedule's ticks and the outbox relay's deliveries, arrive sealed at a
// worker with keys and run; none is refused.
func TestSeal_SchedulerAndRelay(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	fx := newEffects(t)
	cfg := writeConfig(t, fmt.Sprintf(`
schedules:
  - id: sealed-tick
    name: Sealed tick
    every: 1s
    kind: http.request
    args: {url: "%s/tick"}
outbox:
  routes:
    - topic: order.placed
      name: hook
      url: %s/hook
      secret_env: HOOK_SECRET
`, fx.srv.URL, fx.srv.URL))
	w := startWorker(t, url, append(debug, "FERRY_CONFIG="+cfg, "HOOK_SECRET="+hookSecret, "FERRY_SEAL_KEYS="+sealKey(t)), electionArgs(time.Second)...)
	_, err := w.WaitForLineFunc(10*time.Second, logtest.Logged("seal: jobs are sealed and verified"))
	require.NoError(t, err)
	_, err = pool.Exec(t.Context(), `INSERT INTO ferry_outbox (topic, payload) VALUES ('order.placed', '{"order": 1}')`)
	require.NoError(t, err)

	require.Eventually(t, func() bool {
		hits := fx.snapshot()
		return hits["/tick"] >= 2 && hits["/hook"] == 1
	}, 30*time.Second, 50*time.Millisecond, "ticks and the delivery ran: %v", fx.snapshot())
	// Completed: two ticks and the delivery at least, once River's
	// completer has recorded them.
	var completed, unsealed, refused int
	require.Eventually(t, func() bool {
		require.NoError(t, pool.QueryRow(t.Context(), `
			SELECT count(*) FILTER (WHERE state = 'completed' AND ferry_sealed(tags, metadata) AND NOT metadata ? 'ferry_seal'),
			       count(*) FILTER (WHERE NOT ferry_sealed(tags, metadata)),
			       count(*) FILTER (WHERE state = 'discarded')
			FROM river_job`).Scan(&completed, &unsealed, &refused))
		return completed >= 3
	}, 30*time.Second, 50*time.Millisecond)
	require.Zero(t, unsealed, "every job ferry inserted is sealed")
	require.Zero(t, refused)
	stop(t, w, stopTimeout)
	require.NotContains(t, w.Stderr()+w.Stdout(), "seal: job refused")
}
