package outbox

import "context"

// Tracer makes the outbox's spans: the relay's and the webhook requests'.
// The worker's records them with OpenTelemetry (ferry.Config's
// TracerProvider); a nil Tracer records none, and a traced message's W3C
// context still passes to its delivery jobs and, when the otelferry module
// is imported, to its webhook requests' traceparent header.
//
// The outbox module links no tracing library (a service that imports it to
// write messages gets River and pgx alone): the interface is the seam.
type Tracer interface {
	// Relay starts the producer span "outbox.relay" of relaying message id
	// of topic, a child of the writer's span, whose W3C context parent and
	// state are. It returns the new span's W3C context, which the
	// message's delivery jobs carry (so their spans are its children), and
	// end, which ends the span with the relay transaction's error (nil:
	// committed).
	Relay(ctx context.Context, parent, state string, id int64, topic string) (spanParent, spanState string, end func(err error))
	// Request starts the client span of one webhook request of message id
	// to route at url (redacted), a child of ctx's span (the delivery
	// job's). It returns the span's context, which the request is made in
	// and whose W3C context its traceparent header carries, and end, which
	// ends the span with the response's status (0: none) and the attempt's
	// error (nil: delivered).
	Request(ctx context.Context, route, url string, id int64) (_ context.Context, end func(status int, err error))
	// Within returns ctx (its deadline and values) with the W3C context
	// parent and state as its span's instead of the job's; with parent
	// empty, no span. A delivery job that goes on with the next messages
	// of its ordered chain makes their requests' spans in their own
	// messages' traces (children of their writers'), not in its first
	// message's.
	Within(ctx context.Context, parent, state string) context.Context
}
