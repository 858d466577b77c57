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
	withins  []string // "parent state"
}

const childParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01"

type requestKey struct{}

func (r *recordingTracer) Within(ctx context.Context, parent, state string) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.withins = append(r.withins, parent+" "+state)
	return ctx
}

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

// TestDeliverWorker_ChainedTrace: a message of an ordered chain delivered
// by its predecessor's job is requested in its own message's trace: the
// Tracer's Within gets its W3C context, and without a Tracer its request
// carries it in traceparent (the job's own message's request carries the
// job's, here none).
func TestDeliverWorker_ChainedTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	var mu sync.Mutex
	var headers []string
	srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		headers = append(headers, r.Header.Get("traceparent")+" "+r.Header.Get("tracestate"))
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	route := Route{Topic: "order.placed", Name: "billing", URL: srv.URL}
	const p1, p2 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-0af7651916cd43dd8448eb211c80319c-b9c7c989f97918e1-01"
	for _, key := range []string{"plain", "traced"} {
		_, err := b.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, ordering_key, traceparent, tracestate) VALUES ('order.placed', '{}', $1, $2, NULL), ('order.placed', '{}', $1, $3, 'congo=t61rcWkgMzE')`, key, p1, p2)
		require.NoError(t, err)
	}
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), Logger: slog.New(slog.DiscardHandler)})
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	first := func(key string) int64 {
		var id int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT min(id) FROM ferry_outbox WHERE ordering_key = $1`, key).Scan(&id))
		return id
	}

	plain := NewDeliverWorker(DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, plain.Work(ctx, deliverJob(first("plain"), "billing", 1, 24)))
	require.Equal(t, []string{" ", p2 + " congo=t61rcWkgMzE"}, headers, "the second message, delivered by the first's job, in its own trace")

	tracer := &recordingTracer{}
	traced := NewDeliverWorker(DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Tracer: tracer, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, traced.Work(ctx, deliverJob(first("traced"), "billing", 1, 24)))
	require.Equal(t, []string{p2 + " congo=t61rcWkgMzE"}, tracer.withins)
	require.Len(t, tracer.requests, 2, "a span for each request")
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status <> 'delivered'`))
}
