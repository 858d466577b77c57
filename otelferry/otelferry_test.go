package otelferry_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryq/ferry/internal/base/traceparent"
	"github.com/ferryq/ferry/otelferry"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	state  = "congo=t61rcWkgMzE"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := otelferry.ContextWith(context.Background(), parent, state)
	require.True(t, trace.SpanContextFromContext(ctx).IsRemote())
	p, s := otelferry.FromContext(ctx)
	require.Equal(t, parent, p)
	require.Equal(t, state, s)
}

func TestNoTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, s := otelferry.FromContext(ctx)
	require.Empty(t, p+s)
	require.Equal(t, ctx, otelferry.ContextWith(ctx, "", ""))
	require.False(t, trace.SpanContextFromContext(otelferry.ContextWith(ctx, "00-zz-yy-01", "")).IsValid(), "a malformed traceparent is no parent")
}

// TestInstalled: importing the package installs its capture, which the
// library modules' insert middleware and webhook headers use.
func TestInstalled(t *testing.T) {
	t.Parallel()
	ctx := otelferry.ContextWith(context.Background(), parent, state)
	p, s := traceparent.FromContext(ctx)
	require.Equal(t, parent, p)
	require.Equal(t, state, s)

	h := http.Header{}
	traceparent.InjectHeader(ctx, h)
	require.Equal(t, parent, h.Get("traceparent"))
	require.Equal(t, state, h.Get("tracestate"))

	params := []*rivertype.JobInsertParams{{Metadata: []byte(`{"a":1}`)}}
	mw := traceparent.InsertMiddleware().(rivertype.JobInsertMiddleware)
	_, err := mw.InsertMany(ctx, params, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1,"traceparent":"`+parent+`","tracestate":"`+state+`"}`, string(params[0].Metadata))
}
