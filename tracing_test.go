package ferry_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/workflow"
)

type flakyArgs struct{}

func (flakyArgs) Kind() string { return "test.flaky" }

// flakyWorker fails a job's first attempt and completes the second, which
// River runs at once.
type flakyWorker struct {
	river.WorkerDefaults[flakyArgs]
	done chan struct{}
}

func (w *flakyWorker) Work(ctx context.Context, job *river.Job[flakyArgs]) error {
	if job.Attempt == 1 {
		return errors.New("the first attempt fails")
	}
	close(w.done)
	return nil
}

func (w *flakyWorker) NextRetry(*river.Job[flakyArgs]) time.Time { return time.Now() }

// TestTracing_OneTrace: a request that writes an outbox message and inserts
// a job in one transaction is one trace, recorded by an in-memory exporter:
// the relay's span is the request's child, the delivery job's the relay's,
// the webhook request's the job's, and the webhook gets that span in its
// traceparent header; the job's two attempts are the request's children,
// the second linked to the first.
func TestTracing_OneTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	exporter, tp := memoryTracer(t)

	got := make(chan string, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(hook.Close)

	flaky := &flakyWorker{done: make(chan struct{})}
	cfg := quietConfig(url)
	cfg.Admin.Addr = "off"
	cfg.TracerProvider = tp
	cfg.Kinds = []jobs.Kind{jobs.Define[flakyArgs](flaky, "default", "fails once")}
	cfg.Outbox.Routes = []outbox.Route{{Topic: "order.placed", Name: "hook", URL: hook.URL}}
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	runServer(t, srv)

	pool := pgtest.PoolFor(t, url)
	ins, err := jobs.NewInserter(pool)
	require.NoError(t, err)
	rctx, request := tp.Tracer("test").Start(ctx, "request")
	var msgID, jobID int64
	require.NoError(t, pgx.BeginFunc(rctx, pool, func(tx pgx.Tx) error {
		if msgID, err = outbox.Add(rctx, tx, "order.placed", map[string]int{"order_id": 42}); err != nil {
			return err
		}
		res, err := ins.InsertTx(rctx, tx, flakyArgs{}, nil)
		if err != nil {
			return err
		}
		jobID = res.Job.ID
		return nil
	}))
	request.End()
	trace0 := request.SpanContext().TraceID()

	var header string
	select {
	case header = <-got:
	case <-time.After(20 * time.Second):
		t.Fatal("the webhook got no request")
	}
	select {
	case <-flaky.done:
	case <-time.After(20 * time.Second):
		t.Fatal("the flaky job's second attempt did not run")
	}

	// The spans end after the work they cover returns: wait for all six.
	byName := func(spans tracetest.SpanStubs, name string) []tracetest.SpanStub {
		var out []tracetest.SpanStub
		for _, s := range spans {
			if s.Name == name {
				out = append(out, s)
			}
		}
		return out
	}
	var spans tracetest.SpanStubs
	require.Eventually(t, func() bool {
		spans = exporter.GetSpans()
		return len(byName(spans, "outbox.relay")) == 1 && len(byName(spans, "river.work/outbox.deliver")) == 1 &&
			len(byName(spans, "POST")) == 1 && len(byName(spans, "river.work/test.flaky")) == 2
	}, 20*time.Second, 20*time.Millisecond, "spans: %v", names(exporter.GetSpans()))

	relay := byName(spans, "outbox.relay")[0]
	deliver := byName(spans, "river.work/outbox.deliver")[0]
	post := byName(spans, "POST")[0]
	for _, s := range []tracetest.SpanStub{relay, deliver, post} {
		require.Equal(t, trace0, s.SpanContext.TraceID(), "%s is in the request's trace", s.Name)
	}
	require.Equal(t, request.SpanContext().SpanID(), relay.Parent.SpanID(), "the relay's parent is the request")
	require.Equal(t, relay.SpanContext.SpanID(), deliver.Parent.SpanID(), "the delivery job's parent is the relay")
	require.Equal(t, deliver.SpanContext.SpanID(), post.Parent.SpanID(), "the webhook request's parent is the delivery job")
	require.Equal(t, trace.SpanKindClient, post.SpanKind)
	require.Equal(t, "00-"+trace0.String()+"-"+post.SpanContext.SpanID().String()+"-01", header, "the webhook carries its request's span")
	require.Contains(t, post.Attributes, attrInt("http.response.status_code", http.StatusNoContent))
	require.Contains(t, relay.Attributes, attrInt64("ferry.outbox.message_id", msgID))

	attempts := byName(spans, "river.work/test.flaky")
	slices.SortFunc(attempts, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
	first, second := attempts[0], attempts[1]
	for _, s := range attempts {
		require.Equal(t, trace0, s.SpanContext.TraceID())
		require.Equal(t, request.SpanContext().SpanID(), s.Parent.SpanID(), "each attempt's parent is the request")
		require.Contains(t, s.Attributes, attrInt64("messaging.message.id", jobID))
	}
	require.Equal(t, codes.Error, first.Status.Code)
	require.Equal(t, "the first attempt fails", first.Status.Description)
	require.Equal(t, codes.Unset, second.Status.Code)
	require.Len(t, second.Links, 1, "the retry links to the first attempt")
	require.Equal(t, first.SpanContext.SpanID(), second.Links[0].SpanContext.SpanID())
	require.Empty(t, first.Links)

	// Nothing traced, nothing stored.
	var id int64
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		id, err = outbox.Add(ctx, tx, "order.placed", map[string]int{"order_id": 43})
		return err
	}))
	var stored *string
	require.NoError(t, pool.QueryRow(ctx, `SELECT traceparent FROM ferry_outbox WHERE id = $1`, id).Scan(&stored))
	require.Nil(t, stored)
	require.NoError(t, pool.QueryRow(ctx, `SELECT traceparent FROM ferry_outbox WHERE id = $1`, msgID).Scan(&stored))
	require.NotNil(t, stored)
	require.Equal(t, "00-"+trace0.String()+"-"+request.SpanContext().SpanID().String()+"-01", *stored)
}

func names(spans tracetest.SpanStubs) []string {
	out := make([]string, len(spans))
	for i, s := range spans {
		out[i] = s.Name
	}
	return out
}

func attrInt(k string, v int) attribute.KeyValue     { return attribute.Int(k, v) }
func attrInt64(k string, v int64) attribute.KeyValue { return attribute.Int64(k, v) }

// TestTracing_WorkflowOneTrace: a workflow inserted under a span is one
// trace: every step's span is the inserting span's child, the steps
// released by the trigger as well as the first.
func TestTracing_WorkflowOneTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	exporter, tp := memoryTracer(t)
	cfg := quietConfig(url)
	cfg.Admin.Addr = "off"
	cfg.TracerProvider = tp
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	runServer(t, srv)

	pool := pgtest.PoolFor(t, url)
	ins, err := jobs.NewInserter(pool)
	require.NoError(t, err)
	rctx, request := tp.Tracer("test").Start(ctx, "request")
	wf := workflow.New("traced")
	wf.ID = "traced"
	wf.Add("a", jobs.NoopArgs{}).Add("b", jobs.NoopArgs{}, workflow.After("a")).Add("c", jobs.NoopArgs{}, workflow.After("b"))
	require.NoError(t, pgx.BeginFunc(rctx, pool, func(tx pgx.Tx) error {
		_, err := workflow.InsertTx(rctx, tx, ins, wf)
		return err
	}))
	request.End()

	var steps []tracetest.SpanStub
	require.Eventually(t, func() bool {
		steps = steps[:0]
		for _, s := range exporter.GetSpans() {
			if s.Name == "river.work/ferry.noop" {
				steps = append(steps, s)
			}
		}
		return len(steps) == 3
	}, 20*time.Second, 20*time.Millisecond, "spans: %v", names(exporter.GetSpans()))
	for _, s := range steps {
		require.Equal(t, request.SpanContext().TraceID(), s.SpanContext.TraceID(), "a step is in the request's trace")
		require.Equal(t, request.SpanContext().SpanID(), s.Parent.SpanID(), "a step's parent is the inserting span")
	}
}

// memoryTracer is a tracer provider whose spans an in-memory exporter
// keeps, shut down when the test ends.
func memoryTracer(t *testing.T) (*tracetest.InMemoryExporter, *sdktrace.TracerProvider) {
	t.Helper()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return exporter, tp
}
