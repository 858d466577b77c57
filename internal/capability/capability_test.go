package capability

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
)

// named is a middleware that knows its name, to read an order back.
type named struct {
	river.MiddlewareDefaults
	name string
}

// fake is a capability whose Build runs build.
type fake struct {
	name  string
	build func(b *Build) error
}

func (f fake) Name() string         { return f.name }
func (f fake) Build(b *Build) error { return f.build(b) }
func mw(name string) *named         { return &named{name: name} }
func names(mws []rivertype.Middleware) (out []string) {
	for _, m := range mws {
		out = append(out, m.(*named).name)
	}
	return out
}

// The chain is ordered by layer, outermost first, and within a layer in the
// order the capabilities recorded it, whichever capability came first in
// the list.
func TestBuild_WorkMiddlewareByLayer(t *testing.T) {
	t.Parallel()
	b := &Build{}
	require.NoError(t, b.Add(
		fake{"errors", func(b *Build) error { b.Middleware(LayerErrors, mw("errors")); return nil }},
		fake{"observe", func(b *Build) error {
			b.Middleware(LayerObserve, mw("metrics"), mw("tracing"))
			return nil
		}},
		fake{"admit", func(b *Build) error {
			b.Middleware(LayerAdmit, mw("verifier"))
			b.Middleware(LayerAdmit, mw("limits"))
			return nil
		}},
		fake{"insert", func(b *Build) error { b.Middleware(LayerInsert, mw("unique-key"), mw("seal")); return nil }},
		fake{"lease", func(b *Build) error { b.Middleware(LayerLease, mw("ledger")); return nil }},
	))
	require.Equal(t, []string{"ledger", "unique-key", "seal", "verifier", "limits", "metrics", "tracing", "errors"}, names(b.WorkMiddleware()))
}

// A capability whose Build fails stops the list, its error returned as it
// is; the capabilities after it are not built. Invalid marks an error as
// one of configuration.
func TestBuild_AddStopsAtTheFailingCapability(t *testing.T) {
	t.Parallel()
	b := &Build{}
	var built []string
	record := func(name string, err error) Capability {
		return fake{name, func(*Build) error { built = append(built, name); return err }}
	}
	bad := Invalid(errors.New(`limits: limit "x": rate: not a rate`))
	err := b.Add(record("first", nil), record("limits", bad), record("last", nil))
	require.EqualError(t, err, `limits: limit "x": rate: not a rate`)
	require.ErrorIs(t, err, ErrConfig)
	require.Equal(t, []string{"first", "limits"}, built)
	require.NotErrorIs(t, b.Add(record("other", errors.New("telegram: unreachable"))), ErrConfig)
}

// Services, steps and stoppers come back in the order recorded; a step
// runs at Start, a stopper at Stop.
func TestBuild_ServicesInOrder(t *testing.T) {
	t.Parallel()
	b := &Build{}
	var did []string
	require.NoError(t, b.Add(fake{"steps", func(b *Build) error {
		b.Around(Step(func(context.Context) error { did = append(did, "publish"); return nil }))
		b.Around(onStop(func() { did = append(did, "wait") }))
		b.Service(Step(func(context.Context) error { did = append(did, "serve"); return nil }))
		return nil
	}}))
	ctx := context.Background()
	for _, s := range b.AroundServices() {
		require.NoError(t, s.Start(ctx))
	}
	for _, s := range b.Services() {
		require.NoError(t, s.Start(ctx))
	}
	around := b.AroundServices()
	for i := len(around) - 1; i >= 0; i-- {
		around[i].Stop()
	}
	require.Equal(t, []string{"publish", "serve", "wait"}, did)
}

// /readyz reports the first check that fails, in the order recorded.
func TestBuild_CheckReadyFirstFailure(t *testing.T) {
	t.Parallel()
	b := &Build{}
	require.NoError(t, b.Add(
		fake{"ok", func(b *Build) error { b.Ready(func(context.Context) error { return nil }); return nil }},
		fake{"seal", func(b *Build) error {
			b.Ready(func(context.Context) error { return errors.New("seal: jobs refused") })
			return nil
		}},
		fake{"later", func(b *Build) error {
			b.Ready(func(context.Context) error { return errors.New("later") })
			return nil
		}},
	))
	require.EqualError(t, b.CheckReady(context.Background()), "seal: jobs refused")
	require.NoError(t, (&Build{}).CheckReady(context.Background()))
}

// The job-context wrappers apply in the order recorded; none recorded is
// no wrapper at all.
func TestBuild_WrapJobContext(t *testing.T) {
	t.Parallel()
	type key struct{}
	b := &Build{}
	require.Nil(t, b.WrapJobContext())
	b.JobContext(func(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, "first") })
	b.JobContext(func(ctx context.Context) context.Context {
		return context.WithValue(ctx, key{}, ctx.Value(key{}).(string)+", second")
	})
	require.Equal(t, "first, second", b.WrapJobContext()(context.Background()).Value(key{}))
}

// The steps recorded with OnRiver run when the server hands its River
// clients over, in order, and the first failure stops them.
func TestBuild_OnRiver(t *testing.T) {
	t.Parallel()
	b := &Build{}
	var ran []string
	b.OnRiver(func(*river.Client[pgx.Tx]) error { ran = append(ran, "ui"); return nil })
	b.OnRiver(func(*river.Client[pgx.Tx]) error { ran = append(ran, "admin"); return errors.New("admin: bad address") })
	b.OnRiver(func(*river.Client[pgx.Tx]) error { ran = append(ran, "later"); return nil })
	require.EqualError(t, b.SetRiver(nil, nil), "admin: bad address")
	require.Equal(t, []string{"ui", "admin"}, ran)
}

// onStop is a service whose Stop does fn.
type onStop func()

func (onStop) Start(context.Context) error { return nil }
func (f onStop) Stop()                     { f() }

// TestBuild_PagesInOrder: the pages the capabilities record come back in
// the list's order, for the admin console, which builds once all have.
func TestBuild_PagesInOrder(t *testing.T) {
	t.Parallel()
	var b Build
	page := func(name string) func(*Build) error {
		return func(b *Build) error {
			b.Page(Page{Name: name, Title: name, Data: func(context.Context) (any, error) { return name, nil }})
			return nil
		}
	}
	require.NoError(t, b.Add(fake{"a", page("alpha")}, fake{"b", func(*Build) error { return nil }}, fake{"c", page("gamma")}))
	var got []string
	for _, p := range b.Pages() {
		got = append(got, p.Name)
	}
	require.Equal(t, []string{"alpha", "gamma"}, got)
	require.Equal(t, []string{"a", "b", "c"}, b.Names(), "the capabilities built, in order")
	b.Pages()[0].Name = "changed"
	require.Equal(t, "alpha", b.Pages()[0].Name, "Pages is a copy")
}
