// Package traceparent carries W3C trace context (the traceparent and
// tracestate headers) between a context and where ferry keeps it: a job's
// metadata (keys "traceparent" and "tracestate", the keys River's otelriver
// uses) and an outbox message's columns of the same names. A job or message
// written in a traced request thus carries the request's trace to the
// worker that runs or delivers it, even days later, in another process.
//
// It links no tracing library: reading a context's span is the capture
// function's job, which the otelferry module installs for OpenTelemetry
// (SetCapture). Until one is installed no context holds a trace, and the
// packages a service imports to write (jobs, outbox) stay free of any
// tracing library's modules. When the context holds no span, nothing is
// stored and nothing is allocated.
package traceparent

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Keys of the trace context in a job's metadata, and the names of the W3C
// headers.
const (
	Key      = "traceparent"
	StateKey = "tracestate"
)

// Capture returns ctx's current span context as W3C header values: both
// empty when ctx holds no valid span context.
type Capture func(ctx context.Context) (parent, state string)

var capture atomic.Pointer[Capture]

// SetCapture installs f as the process's capture of trace context (nil
// removes it). The otelferry module installs OpenTelemetry's when it is
// imported; the worker imports it.
func SetCapture(f Capture) {
	if f == nil {
		capture.Store(nil)
		return
	}
	capture.Store(&f)
}

// FromContext returns ctx's span context as W3C header values: both empty
// when ctx holds no valid span context or no capture is installed. A
// context made by Within returns what it was given.
func FromContext(ctx context.Context) (parent, state string) {
	if w, ok := ctx.Value(withinKey{}).(within); ok {
		return w.parent, w.state
	}
	if f := capture.Load(); f != nil {
		return (*f)(ctx)
	}
	return "", ""
}

type (
	withinKey struct{}
	within    struct{ parent, state string }
)

// Within returns ctx holding the W3C context parent and state (none when
// parent is empty) in place of its span's, for FromContext and
// InjectHeader: the outbox's request of a message delivered by another
// message's job, without a tracer to make it a span, carries its own
// message's trace.
func Within(ctx context.Context, parent, state string) context.Context {
	return context.WithValue(ctx, withinKey{}, within{parent, state})
}

// InjectHeader sets h's traceparent and tracestate headers from ctx's span
// context; nothing when ctx holds none.
func InjectHeader(ctx context.Context, h http.Header) {
	parent, state := FromContext(ctx)
	if parent == "" {
		return
	}
	h.Set(Key, parent)
	if state != "" {
		h.Set(StateKey, state)
	}
}

// keyBytes is Key, for a look into metadata before it is parsed.
var keyBytes = []byte(Key)

// FromMetadata reads the trace context from a job's metadata.
func FromMetadata(metadata []byte) (parent, state string) {
	if !bytes.Contains(metadata, keyBytes) {
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
