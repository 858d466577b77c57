package tracing

import (
	"context"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ferryq/ferry/otelferry"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// work runs one job with the inserter's trace context through mw and
// returns the trace context the job saw and whether its span records.
func work(t *testing.T, mw rivertype.Middleware) (seen string, recording bool) {
	t.Helper()
	job := &rivertype.JobRow{ID: 1, Attempt: 1, Kind: "test", Queue: "default", Metadata: []byte(`{"traceparent":"` + parent + `"}`)}
	err := mw.(rivertype.WorkerMiddleware).Work(context.Background(), job, func(ctx context.Context) error {
		seen, _ = otelferry.FromContext(ctx)
		recording = trace.SpanFromContext(ctx).IsRecording()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seen, recording
}

// A provider that records nothing makes no span, and the job's context
// still carries the inserter's trace context (an outbox delivery passes
// it on).
func TestMiddleware_NoOpProviderCarriesTheTraceContext(t *testing.T) {
	mw := Middleware(noop.NewTracerProvider())
	if !mw.(*middleware).recordsNothing() {
		t.Fatal("the no-op provider: want no span")
	}
	if seen, recording := work(t, mw); seen != parent || recording {
		t.Errorf("job saw trace context %q (recording %v), want %q not recording", seen, recording, parent)
	}
}

// The global provider records nothing until one is set; once set, the
// middleware made before makes its spans, job by job.
func TestMiddleware_GlobalProviderSetLater(t *testing.T) {
	if otel.GetTracerProvider() != initialGlobal {
		t.Fatal("the global tracer provider was set before this test; it must run first in the package")
	}
	mw := Middleware(otel.GetTracerProvider())
	if seen, recording := work(t, mw); seen != parent || recording {
		t.Errorf("before a provider is set: job saw %q (recording %v), want %q not recording", seen, recording, parent)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	otel.SetTracerProvider(tp)
	if _, recording := work(t, mw); !recording {
		t.Error("after a provider is set: the job's span records nothing")
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "river.work/test" || spans[0].Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("spans %v, want one river.work/test in the inserter's trace", spans)
	}
}

// BenchmarkMiddleware is a job's cost in the middleware with a provider
// that records nothing: no span (as it runs), and a span that records
// nothing (as it ran before).
func BenchmarkMiddleware(b *testing.B) {
	job := &rivertype.JobRow{ID: 1, Attempt: 1, Kind: "test", Queue: "default", Metadata: []byte(`{}`)}
	inner := func(context.Context) error { return nil }
	for _, bc := range []struct {
		name string
		mw   *middleware
	}{
		{"no span", Middleware(noop.NewTracerProvider()).(*middleware)},
		{"span recording nothing", &middleware{tracer: noop.NewTracerProvider().Tracer(tracerName)}},
		// As `worker run` ran with no OTEL_* variable (run alone: a test
		// before may have set the global provider).
		{"span recording nothing, global", &middleware{tracer: initialGlobal.Tracer(tracerName)}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = bc.mw.Work(context.Background(), job, inner)
			}
		})
	}
}
