// Package traceparent carries W3C trace context (the traceparent and
// tracestate headers) between a context and where ferry keeps it: a job's
// metadata (keys "traceparent" and "tracestate", the keys River's otelriver
// uses) and an outbox message's columns of the same names. A job or message
// written in a traced request thus carries the request's trace to the
// worker that runs or delivers it, even days later, in another process.
//
// It uses the OpenTelemetry trace API only, never the SDK: the packages a
// service imports to write (jobs, outbox) stay free of exporters. When the
// context holds no span, nothing is stored and nothing is allocated.
package traceparent

import (
	"context"
	"net/http"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Keys of the trace context in a job's metadata, and the names of the W3C
// headers.
const (
	Key      = "traceparent"
	StateKey = "tracestate"
)

var w3c = propagation.TraceContext{}

// FromContext returns ctx's span context as W3C header values: both empty
// when ctx holds no valid span context.
func FromContext(ctx context.Context) (parent, state string) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", ""
	}
	c := propagation.MapCarrier{}
	w3c.Inject(ctx, c)
	return c[Key], c[StateKey]
}

// ContextWith returns ctx holding the remote span context that parent and
// state describe; ctx itself when parent is empty or malformed.
func ContextWith(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	return w3c.Extract(ctx, propagation.MapCarrier{Key: parent, StateKey: state})
}

// InjectHeader sets h's traceparent and tracestate headers from ctx's span
// context; nothing when ctx holds none.
func InjectHeader(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		w3c.Inject(ctx, propagation.HeaderCarrier(h))
	}
}

// FromMetadata reads the trace context from a job's metadata.
func FromMetadata(metadata []byte) (parent, state string) {
	if len(metadata) == 0 {
		return "", ""
	}
	r := gjson.GetManyBytes(metadata, Key, StateKey)
	return r[0].String(), r[1].String()
}

// SetMetadata returns metadata (a JSON object, or empty) with parent and
// state set; metadata unchanged when parent is empty.
func SetMetadata(metadata []byte, parent, state string) ([]byte, error) {
	if parent == "" {
		return metadata, nil
	}
	if len(metadata) == 0 {
		metadata = []byte("{}")
	}
	out, err := sjson.SetBytes(metadata, Key, parent)
	if err == nil && state != "" {
		out, err = sjson.SetBytes(out, StateKey, state)
	}
	return out, err
}

// InsertMiddleware returns the River insert middleware that stores the
// inserting context's trace context in the metadata of each job that does
// not carry one already (the outbox relay sets each delivery's own).
func InsertMiddleware() rivertype.Middleware { return &insertMiddleware{} }

type insertMiddleware struct {
	river.MiddlewareDefaults
}

var _ rivertype.JobInsertMiddleware = (*insertMiddleware)(nil)

func (*insertMiddleware) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	parent, state := FromContext(ctx)
	if parent == "" {
		return doInner(ctx)
	}
	for _, p := range params {
		if gjson.GetBytes(p.Metadata, Key).Exists() {
			continue
		}
		md, err := SetMetadata(p.Metadata, parent, state)
		if err != nil {
			return nil, err
		}
		p.Metadata = md
	}
	return doInner(ctx)
}
