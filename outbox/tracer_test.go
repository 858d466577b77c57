package outbox

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// recordingTracer is a Tracer that records its calls: the relay's spans
// get the W3C context childParent, and a request's context carries its
// route, as a real tracer's carries its span.
type recordingTracer struct {
	mu       sync.Mutex
	relays   []string // "id topic parent state"
	ended    []error
	requests []string // "route url"
	results  []int
	errs     []error
}

const childParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"

type requestKey struct{}

func (r *recordingTracer) Relay(_ context.Context, parent, state string, id int64, topic string) (string, string, func(error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.relays = append(r.relays, topic+" "+parent+" "+state)
	return childParent, state, func(err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ended = append(r.ended, err)
	}
}

func (r *recordingTracer) Request(ctx context.Context, route, url string, id int64) (context.Context, func(int, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, route+" "+url)
	return context.WithValue(ctx, requestKey{}, route), func(status int, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.results, r.errs = append(r.results, status), append(r.errs, err)
	}
}

// TestRelay_Tracer: a traced message's relay span starts with the writer's
// context and ends, without error, once the relay transaction commits; its
// delivery jobs carry the span's context. A message without a trace starts
// no span.
func TestRelay_Tracer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	_, err := b.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, traceparent, tracestate) VALUES ('order.placed', '{}', $1, 'congo=t61rcWkgMzE'), ('order.placed', '{}', NULL, NULL)`, parent)
	require.NoError(t, err)

	tracer := &recordingTracer{}
	rs, err := NewRoutes(webhook("order.placed", "billing"))
	require.NoError(t, err)
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: rs, Tracer: tracer, Logger: slog.New(slog.DiscardHandler)})
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	require.Equal(t, []string{"order.placed " + parent + " congo=t61rcWkgMzE"}, tracer.relays, "one span, for the traced message")
	require.Equal(t, []error{nil}, tracer.ended, "ended once, the transaction committed")
	var traced, untraced int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE metadata->>'traceparent' = $1 AND metadata->>'tracestate' = 'congo=t61rcWkgMzE'),
		count(*) FILTER (WHERE NOT metadata ? 'traceparent') FROM river_job`, childParent).Scan(&traced, &untraced))
	require.Equal(t, 1, traced, "the traced message's delivery job is the relay span's child")
	require.Equal(t, 1, untraced)
}

// TestDeliverWorker_Tracer: each webhook request runs in the context the
// Tracer's span gives it, and ends the span with its status and, for a
// failed attempt, its error.
func TestDeliverWorker_Tracer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := deliverSetup(t)
	status := http.StatusNoContent
	srv := hookServer(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status) })
	tracer := &recordingTracer{}
	w := b.worker(t, DeliverConfig{Client: srv.Client(), Tracer: tracer}, hookRoute(srv, "billing"))

	id := b.seed(t, testTopic, `{}`, "billing")
	require.NoError(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
	status = http.StatusServiceUnavailable
	id = b.seed(t, testTopic, `{}`, "billing")
	requireJobRetry(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))

	require.Equal(t, []string{"billing " + srv.URL + "/hook?…", "billing " + srv.URL + "/hook?…"}, tracer.requests, "the URL as logged: no credentials")
	require.Equal(t, []int{http.StatusNoContent, http.StatusServiceUnavailable}, tracer.results)
	require.NoError(t, tracer.errs[0])
	require.ErrorContains(t, tracer.errs[1], "503")
}
