package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// TestTracing_FromEnvironment: a worker told by OTEL_TRACES_EXPORTER=console
// to trace prints its spans as JSON lines on stdout. A message written with
// plain SQL by a traced service (its traceparent column set) is relayed and
// delivered in that trace: the webhook's traceparent header carries the
// message's trace id and the worker's own span of the request, and the
// worker's spans are in that trace. A value the worker does not know stops
// it with one line.
func TestTracing_FromEnvironment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	headers := make(chan string, 4)
	traced := newHook(t, func(w http.ResponseWriter, r *http.Request, req hookRequest, n int) {
		headers <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusNoContent)
	})
	worker := startHookWorker(t, url, hookConfig(t, traced.URL, "10s"),
		[]string{"OTEL_TRACES_EXPORTER=console", "OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_SERVICE_NAME=ferry-e2e"})

	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		parent  = "00f067aa0ba902b7"
	)
	var id int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO ferry_outbox (topic, payload, traceparent)
		VALUES ('order.placed', '{"order_id": 7}', $1) RETURNING id`, "00-"+traceID+"-"+parent+"-01").Scan(&id))
	var header string
	select {
	case header = <-headers:
	case <-time.After(deliverTimeout):
		t.Fatal("the webhook got no request")
	}
	parts := strings.Split(header, "-")
	require.Len(t, parts, 4, "traceparent %q", header)
	require.Equal(t, traceID, parts[1], "the webhook request is in the message's trace")
	require.NotEqual(t, parent, parts[2], "its parent is the worker's span of the request, not the writer's")
	waitDelivery(t, pool, id, "hook", deliverTimeout, "delivered", isDelivered)
	stop(t, worker, 30*time.Second)

	// Every span printed is JSON; the relay's, the job's and the request's
	// are in the message's trace, the request's with the id the webhook got.
	spans := map[string]string{} // name → span id, for the message's trace
	for line := range strings.Lines(worker.Stdout()) {
		var s struct {
			Name        string
			SpanContext struct{ TraceID, SpanID string }
			Resource    []struct {
				Key   string
				Value struct{ Value any }
			}
		}
		require.NoError(t, json.Unmarshal([]byte(line), &s), "stdout line %q", line)
		if s.SpanContext.TraceID == traceID {
			spans[s.Name] = s.SpanContext.SpanID
		}
		require.Contains(t, fmt.Sprint(s.Resource), "ferry-e2e", "OTEL_SERVICE_NAME names the service")
	}
	require.Contains(t, spans, "outbox.relay", "spans of the trace: %v", spans)
	require.Contains(t, spans, "river.work/outbox.deliver", "spans of the trace: %v", spans)
	require.Equal(t, parts[2], spans["POST"], "the webhook got the worker's span of its request")

	// A value the worker does not know: one line, exit code 2, nothing run.
	p := proctest.Start(t, bins(t).worker, env(url, "OTEL_TRACES_EXPORTER=jaeger"), "run", "--admin-addr", "off")
	code, err := p.Wait(startTimeout)
	require.NoError(t, err)
	require.Equal(t, 2, code, "stderr: %s", p.Stderr())
	require.Contains(t, oneLine(t, p.Stderr()), `OTEL_TRACES_EXPORTER "jaeger": want otlp, console or none`)
}
