// Package otelferry carries a traced service's OpenTelemetry spans into the
// jobs and outbox messages it writes with ferry. Import it for its side
// effect, once, in the service's main package:
//
//	import _ "github.com/ferryq/ferry/otelferry"
//
// From then on, jobs.Inserter and outbox.Add store the W3C trace context
// (traceparent, tracestate) of the span in their context with each job and
// message, and ferry's worker runs the job, the relay, the delivery and
// the webhook request in that trace. Without it nothing is stored: the
// jobs and outbox modules link no tracing library, so a service that does
// not trace gets River and pgx alone.
//
// The context is read with OpenTelemetry's W3C TraceContext propagator
// whatever the service's global propagator is: ferry stores and sends the
// standard form. The worker (package ferry) imports this package itself.
//
// # Module
//
// otelferry is a Go module of its own (github.com/ferryq/ferry/otelferry):
// its module graph is ferry's library modules' and the OpenTelemetry API's,
// which a traced service has already; never the SDK.
package otelferry

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryq/ferry/internal/base/traceparent"
)

func init() { traceparent.SetCapture(FromContext) }

var w3c = propagation.TraceContext{}

// FromContext returns the W3C trace context of ctx's span: both empty when
// ctx holds no valid span context.
func FromContext(ctx context.Context) (parent, state string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c[traceparent.Key], c[traceparent.StateKey]
}

// ContextWith returns ctx holding the remote span context that parent and
// state describe: the parent of spans started in it. ctx itself when parent
// is empty or malformed.
func ContextWith(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{traceparent.Key: parent, traceparent.StateKey: state})
}
