package traceparent

import (
	"context"
	"net/http"
	"os"
	"testing"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	state  = "congo=t61rcWkgMzE"
)

// spanKey holds a test's "span": the capture installed by TestMain reads
// it, as OpenTelemetry's reads its own span from the context.
type spanKey struct{}

type span struct{ parent, state string }

func traced(ctx context.Context, parent, state string) context.Context {
	return context.WithValue(ctx, spanKey{}, span{parent, state})
}

func TestMain(m *testing.M) {
	SetCapture(func(ctx context.Context) (string, string) {
		s, _ := ctx.Value(spanKey{}).(span)
		return s.parent, s.state
	})
	os.Exit(m.Run())
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := traced(context.Background(), parent, state)
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
	require.Equal(t, http.Header{"Traceparent": {parent}, "Tracestate": {state}}, h)
	h = http.Header{}
	InjectHeader(traced(ctx, parent, ""), h)
	require.Equal(t, http.Header{"Traceparent": {parent}}, h, "no state, no tracestate header")
}

// TestWithin: a context made by Within gives what it was given, not its
// span's; with no parent, nothing.
func TestWithin(t *testing.T) {
	t.Parallel()
	const other = "00-0af7651916cd43dd8448eb211c80319c-b9c7c989f97918e1-01"
	ctx := traced(context.Background(), parent, state)
	p, s := FromContext(Within(ctx, other, ""))
	require.Equal(t, other, p)
	require.Empty(t, s)
	h := http.Header{}
	InjectHeader(Within(ctx, "", ""), h)
	require.Empty(t, h, "an untraced message's request carries no trace, not the job's")
}

func TestNoTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, s := FromContext(ctx)
	require.Empty(t, p+s)
	md, err := SetMetadata([]byte(`{"a":1}`), "", "")
	require.NoError(t, err)
	require.Equal(t, `{"a":1}`, string(md))
	p, s = FromMetadata(nil)
	require.Empty(t, p+s)
	h := http.Header{}
	InjectHeader(ctx, h)
	require.Empty(t, h)
}

// TestNoCapture: without a capture installed (a service that does not
// import otelferry), no context holds a trace. Not parallel: it removes the
// capture the other tests use, and puts it back before they run.
func TestNoCapture(t *testing.T) {
	installed := capture.Load()
	require.NotNil(t, installed, "TestMain installed one")
	SetCapture(nil)
	defer capture.Store(installed)
	ctx := traced(context.Background(), parent, state)
	p, s := FromContext(ctx)
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
	_, err := mw.InsertMany(traced(context.Background(), parent, ""), params, func(context.Context) ([]*rivertype.JobInsertResult, error) { return nil, nil })
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
