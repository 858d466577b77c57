// Package tracing is the worker side of ferry's OpenTelemetry traces: the
// River work middleware that runs every job in a span joined to the trace
// of the code that inserted it, and the tracer provider that the standard
// OTEL_* environment variables configure (Setup).
//
// River's own otelriver middleware links a job's span to its inserter's
// rather than parenting it, so an outbox delivery would start a trace of its
// own; ferry's parents it, so one trace runs from the request that wrote a
// message through the relay and the delivery job to the webhook request.
// A job's span is "river.work/<kind>", a consumer span with the job's queue
// (messaging.destination.name), id (messaging.message.id) and attempt
// (river.job.attempt); a failed attempt that will be retried records
// its span in the job's metadata (ferry.first_attempt), and every later
// attempt links to it.
//
// While the provider records nothing (OTel's no-op provider, or the global
// one while no provider is set, as in a worker with no OTEL_* variable),
// the middleware starts no span: the job's context carries the inserter's
// trace context alone, as a span that records nothing would. Such a span
// cost every job 470 ns and 10 allocations (536 B) of the global
// provider's; the job's context alone costs 6 ns and none
// (BenchmarkMiddleware).
package tracing

import (
	"context"
	"errors"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ferryq/ferry/internal/base/traceparent"
	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/otelferry"
)

// FirstAttemptKey is the job metadata key that holds the W3C traceparent of
// a job's first failed attempt, which later attempts link to.
const FirstAttemptKey = "ferry.first_attempt"

// tracerName names the tracer of the work spans.
const tracerName = "github.com/ferryq/ferry"

// Middleware returns the River work middleware that runs each job in a
// span of tp: a child of the trace context in the job's metadata (put there
// by the inserting side, jobs.Middleware), linked to the job's first
// attempt when this one is a retry. With a provider that records nothing
// (the default), the job's context still carries the inserter's trace
// context, which an outbox delivery passes on in its traceparent header.
func Middleware(tp trace.TracerProvider) rivertype.Middleware {
	_, noOp := tp.(noop.TracerProvider)
	return &middleware{tracer: tp.Tracer(tracerName), noOp: noOp, unset: tp == initialGlobal}
}

// initialGlobal is the global provider as the process starts: OTel's
// delegate, which records nothing until a provider is set
// (otel.SetTracerProvider), then hands its tracers' spans to it.
var initialGlobal = otel.GetTracerProvider()

type middleware struct {
	river.MiddlewareDefaults
	tracer trace.Tracer
	// noOp: the provider is OTel's no-op one. unset: it is the global
	// one as the process started, which records nothing while the global
	// provider is still it.
	noOp, unset bool
}

// recordsNothing says whether the middleware's provider makes no span now.
func (m *middleware) recordsNothing() bool {
	return m.noOp || (m.unset && otel.GetTracerProvider() == initialGlobal)
}

var _ rivertype.WorkerMiddleware = (*middleware)(nil)

func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if m.recordsNothing() {
		parent, state := traceparent.FromMetadata(job.Metadata)
		return doInner(otelferry.ContextWith(ctx, parent, state))
	}
	return m.work(ctx, job, doInner)
}

// work runs the job in a span. It is Work's own function so that Work's
// frame stays small: a job's goroutine starts on a small stack, and
// growing it (a copy) cost more than the span that records nothing.
//
//go:noinline
func (m *middleware) work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	parent, state := traceparent.FromMetadata(job.Metadata)
	ctx = otelferry.ContextWith(ctx, parent, state)
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		// Few attributes: each is encoded and sent with every job's span
		// (the kind is in the name; the system and operation are the
		// tracer's, ferry's).
		trace.WithAttributes(
			attribute.String("messaging.destination.name", job.Queue),
			attribute.Int64("messaging.message.id", job.ID),
			attribute.Int("river.job.attempt", job.Attempt),
		),
	}
	first := ""
	if job.Attempt > 1 {
		first = gjson.GetBytes(job.Metadata, gjson.Escape(FirstAttemptKey)).String()
		if sc := trace.SpanContextFromContext(otelferry.ContextWith(context.Background(), first, "")); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String("ferry.link", "first_attempt")}}))
		}
	}
	ctx, span := m.tracer.Start(ctx, "river.work/"+job.Kind, opts...)
	defer span.End()

	err := doInner(ctx)
	var (
		snooze *rivertype.JobSnoozeError
		cancel *rivertype.JobCancelError
	)
	switch {
	case err == nil, errors.As(err, &snooze):
	default:
		span.SetStatus(codes.Error, err.Error())
		if first == "" && !errors.As(err, &cancel) && span.IsRecording() {
			// River may retry it: later attempts link to this one. The
			// update is merged into the job's metadata with the attempt's
			// result, in the same statement.
			if p, _ := otelferry.FromContext(ctx); p != "" {
				_ = river.MetadataSet(ctx, FirstAttemptKey, p)
			}
		}
	}
	return err
}

// Capability is the worker's tracing: the span of every job
// ("river.work/<kind>").
type Capability struct{ tp trace.TracerProvider }

// NewCapability returns the tracing capability on tp (nil: the global
// provider, as Middleware).
func NewCapability(tp trace.TracerProvider) *Capability { return &Capability{tp: tp} }

// Name is "tracing".
func (*Capability) Name() string { return "tracing" }

// Build records the tracing middleware, inside the metrics one (recorded
// after it, in the same layer) and around the error middleware, so that a
// span's status holds the error as River stores it.
func (c *Capability) Build(b *capability.Build) error {
	b.Middleware(capability.LayerObserve, Middleware(c.tp))
	return nil
}
