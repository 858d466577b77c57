package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryq/ferry/otelferry"
	"github.com/ferryq/ferry/outbox"
)

// outboxTracerName names the tracer of the outbox's spans.
const outboxTracerName = "github.com/ferryq/ferry/outbox"

// Outbox returns the outbox's Tracer that records with tp: the relay's
// producer span "outbox.relay" (attributes ferry.outbox.message_id and
// ferry.outbox.topic) and each webhook request's client span "POST"
// (http.request.method, url.full redacted, ferry.outbox.route,
// ferry.outbox.message_id, http.response.status_code), each with status
// Error and the error's text when it failed.
func Outbox(tp trace.TracerProvider) outbox.Tracer {
	return outboxTracer{tracer: tp.Tracer(outboxTracerName)}
}

type outboxTracer struct{ tracer trace.Tracer }

func (o outboxTracer) Relay(ctx context.Context, parent, state string, id int64, topic string) (string, string, func(error)) {
	ctx = otelferry.ContextWith(ctx, parent, state)
	ctx, span := o.tracer.Start(ctx, "outbox.relay", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(attribute.Int64("ferry.outbox.message_id", id), attribute.String("ferry.outbox.topic", topic)))
	p, s := otelferry.FromContext(ctx)
	return p, s, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

func (o outboxTracer) Within(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	return otelferry.ContextWith(ctx, parent, state)
}

func (o outboxTracer) Request(ctx context.Context, route, url string, id int64) (context.Context, func(int, error)) {
	ctx, span := o.tracer.Start(ctx, http.MethodPost, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String("http.request.method", http.MethodPost),
		attribute.String("url.full", url),
		attribute.String("ferry.outbox.route", route),
		attribute.Int64("ferry.outbox.message_id", id)))
	return ctx, func(status int, err error) {
		if status != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", status))
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}
