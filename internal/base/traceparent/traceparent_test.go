package traceparent

import (
	"context"
	"net/http"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	state  = "congo=t61rcWkgMzE"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := ContextWith(context.Background(), parent, state)
	require.True(t, trace.SpanContextFromContext(ctx).IsRemote())
	p, s := FromContext(ctx)
	require.Equal(t, parent, p)
	require.Equal(t, state, s)

	md, err := SetMetadata([]byte(`{"a":1}`), p, s)
	require.NoError(t, err)
	require.JSONEq(t, `{"a":1,"traceparent":"`+parent+`","tracestate":"`+state+`"}`, string(md))
	p, s = FromMetadata(md)
	require.Equal(t, parent, p)
	require.Equal(t, state, s)

	h := http.Header{}
	InjectHeader(ctx, h)
	require.Equal(t, parent, h.Get("traceparent"))
	require.Equal(t, state, h.Get("tracestate"))
}

func TestNoTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, s := FromContext(ctx)
	require.Empty(t, p+s)
	require.Equal(t, ctx, ContextWith(ctx, "", ""))
	require.False(t, trace.SpanContextFromContext(ContextWith(ctx, "00-zz-yy-01", "")).IsValid(), "a malformed traceparent is no parent")
	md, err := SetMetadata([]byte(`{"a":1}`), "", "")
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, string(md))
	p, s = FromMetadata(nil)
	require.Empty(t, p+s)
	h := http.Header{}
	InjectHeader(ctx, h)
	require.Empty(t, h)
}

func TestInsertMiddleware(t *testing.T) {
	t.Parallel()
	mw := InsertMiddleware().(rivertype.JobInsertMiddleware)
	const own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	params := []*rivertype.JobInsertParams{
		{Metadata: []byte(`{}`)},
		{Metadata: []byte(`{"traceparent":"` + own + `"}`)}, // the relay's own: kept
		{},
	}
	_, err := mw.InsertMany(ContextWith(context.Background(), parent, ""), params, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
	require.NoError(t, err)
	require.JSONEq(t, `{"traceparent":"`+parent+`"}`, string(params[0].Metadata))
	require.JSONEq(t, `{"traceparent":"`+own+`"}`, string(params[1].Metadata))
	require.JSONEq(t, `{"traceparent":"`+parent+`"}`, string(params[2].Metadata))

	// No span: nothing written.
	untouched := []*rivertype.JobInsertParams{{Metadata: []byte(`{}`)}}
	_, err = mw.InsertMany(context.Background(), untouched, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
	require.NoError(t, err)
	require.Equal(t, `{}`, string(untouched[0].Metadata))
}
