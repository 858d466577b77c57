// Package capability is ferry's floor plan: the one shape every capability
// of a ferry server has, and the record of what each contributes.
//
// A capability (the leader's rescue, the scheduler, the outbox, Telegram,
// limits, seals, the retention of history tables, …) is a value its own
// package constructs from its own config section, whose defaults and
// checks live beside it (the server checks every section first). The
// server (package ferry's New) builds the shared parts first (the pools,
// the job kinds' registry, the metrics registry, the elector), then calls
// each capability's Build, in the order of its list, with one Build record
// that collects what the capability contributes:
//
//   - job kinds (Build.Kinds) and River middleware, each at its Layer;
//   - services to start and stop, around River or beside it (Around,
//     Service), in ferry's one lifecycle shape (startstop);
//   - leader runnables (Leader, FencedLeader);
//   - metrics collectors (Build.Metrics) and readiness checks (Ready);
//   - admin console pages, each with its JSON (Page).
//
// Then the server builds the River client from what was recorded (a
// service reads it with River from its Start on) and runs it. A
// capability never reaches into another's fields: one that needs
// another gets it as an argument of its constructor, and the list's order
// shows it.
package capability

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/pilot"
	"github.com/ferryq/ferry/jobs"
)

// Capability is one thing a ferry server does.
type Capability interface {
	// Name names the capability in errors ("outbox", "limits").
	Name() string
	// Build records what the capability contributes to the server. It
	// runs once, before the River client exists, in the order of the
	// server's list.
	Build(b *Build) error
}

// Elector is what capabilities ask of the leader layer; election.Elector
// implements it. (This package sits below election, which depends on
// internal/liveness, a capability.)
type Elector interface {
	// Term is the term this process holds, or 0.
	Term() int64
	// Fence fails tx's commit unless this process's term is still the
	// latest.
	Fence(ctx context.Context, tx pgx.Tx) error
	// Deferral is how long a new leader defers to a predecessor that did
	// not resign.
	Deferral() time.Duration
}

// Registrar is where the recorded leader runnables go
// (election.Elector's Register and RegisterFenced).
type Registrar[R ~func(context.Context) error] interface {
	Register(name string, fn R)
	RegisterFenced(name string, fn R)
}

// Runnable is a leader runnable: it runs while this process leads, until
// its context ends (election.Runnable).
type Runnable = func(ctx context.Context) error

// Service is ferry's one lifecycle shape (startstop): Start returns once
// running, Stop is safe twice and after a failed Start.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// Layer is where a River middleware sits in the chain around each job,
// outermost first. Within a layer, middleware keeps the order in which the
// capabilities recorded it.
type Layer int

const (
	// LayerLease holds every job to the worker's liveness lease
	// (internal/liveness): outermost, so that nothing runs outside it.
	LayerLease Layer = iota
	// LayerInsert is the insert middleware (jobs.Middleware: trace
	// context, unique keys, seals). River runs insert and work middleware
	// apart; the layer only orders inserts among themselves.
	LayerInsert
	// LayerAdmit refuses or holds a job before anything observes it (the
	// seal verifier, then limits).
	LayerAdmit
	// LayerObserve measures and traces the jobs that run.
	LayerObserve
	// LayerErrors is innermost: it bounds (or withholds) a job's error
	// before it is observed, logged and stored.
	LayerErrors
)

// Build is the record of what the capabilities contribute, and what they
// share. The server makes one; each capability's Build adds to it.
type Build struct {
	// Ctx is the context of the server's New, for what a capability reads
	// or writes while it builds (bounded queues record their bounds).
	Ctx context.Context
	// Pool carries job traffic (through a transaction pooler when one is
	// configured); Sessions is for what needs a lasting session (Pool
	// itself without a pooler).
	Pool     *pgxpool.Pool
	Sessions *pgxpool.Pool
	// Schema is the deployment's schema ("" for the search_path's first).
	Schema string
	// ClientID is this process's River client id: its worker's identity.
	ClientID string
	Logger   *slog.Logger
	// Kinds is the registry of the job kinds this process works; a
	// capability adds its own.
	Kinds *jobs.Registry
	// Metrics is where a capability registers its collectors; Gatherer
	// is what /metrics exposes of them.
	Metrics  prometheus.Registerer
	Gatherer prometheus.Gatherer
	// Elector is the leader layer (election.Elector), for capabilities
	// that fence their writes or wait out a predecessor; a capability adds
	// its leader runnables with Leader and FencedLeader.
	Elector Elector
	// Queues is the worker count of every queue the River client works
	// (none: a client that only inserts, which runs no job and has no
	// events).
	Queues map[string]int
	// Pilot is the River pilot of the server's working client: a
	// capability sets its part of it (the workflows' job cleaner, the
	// fetch of priority aging).
	Pilot *pilot.Pilot

	river, insertOnly *river.Client[pgx.Tx]

	middleware []placed
	jobContext []func(context.Context) context.Context
	around     []Service
	services   []Service
	leaders    []leader
	ready      []func(context.Context) error
	pages      []Page
	names      []string
	onRiver    []func(*river.Client[pgx.Tx]) error
}

type placed struct {
	layer Layer
	mw    rivertype.Middleware
}

type leader struct {
	name   string
	run    Runnable
	fenced bool
}

// River is the server's River client once the server has built it (from
// what Build recorded): nil during Build; a service reads it from its
// Start on.
func (b *Build) River() *river.Client[pgx.Tx] { return b.river }

// InsertOnly is the server's insert-only River client, once built: it
// works no queue, carries the same middleware as River, and sends River's
// own insert notification at most once a day per queue, for a capability
// that sends its own in the transaction that inserts (the outbox's
// relay).
func (b *Build) InsertOnly() *river.Client[pgx.Tx] { return b.insertOnly }

// OnRiver records a step that needs the River client to make what the
// capability serves (River UI reads it): it runs once the client is
// built, before anything starts.
func (b *Build) OnRiver(fn func(*river.Client[pgx.Tx]) error) { b.onRiver = append(b.onRiver, fn) }

// SetRiver hands the server's River clients to the capabilities (River,
// InsertOnly) and runs the steps recorded with OnRiver, in order.
func (b *Build) SetRiver(rc, insertOnly *river.Client[pgx.Tx]) error {
	b.river, b.insertOnly = rc, insertOnly
	for _, fn := range b.onRiver {
		if err := fn(rc); err != nil {
			return err
		}
	}
	return nil
}

// Add runs each capability's Build in order and stops at the first that
// fails, returning its error as it is: ferry's errors name their
// capability ("limits: …", "telegram: …"). A capability's error about its
// configuration wraps ErrConfig (Invalid).
func (b *Build) Add(caps ...Capability) error {
	for _, c := range caps {
		if err := c.Build(b); err != nil {
			return err
		}
		b.names = append(b.names, c.Name())
	}
	return nil
}

// Names are the names of the capabilities built, in order: the server
// says them when it has started.
func (b *Build) Names() []string { return slices.Clone(b.names) }

// ErrConfig marks an error of a capability's Build as one of its
// configuration (the server reports it as ferry.ErrConfig, which the
// commands turn into a usage error).
var ErrConfig = errors.New("capability: configuration")

// Invalid marks err as one of the capability's configuration (ErrConfig);
// its message is err's.
func Invalid(err error) error { return invalid{err} }

type invalid struct{ err error }

func (e invalid) Error() string   { return e.err.Error() }
func (e invalid) Unwrap() []error { return []error{e.err, ErrConfig} }

// Middleware records River middleware at a layer.
func (b *Build) Middleware(layer Layer, mw ...rivertype.Middleware) {
	for _, m := range mw {
		b.middleware = append(b.middleware, placed{layer: layer, mw: m})
	}
}

// JobContext records a wrapper of every job's context, applied to the
// context River gives the job's worker.
func (b *Build) JobContext(wrap func(context.Context) context.Context) {
	b.jobContext = append(b.jobContext, wrap)
}

// Around records a service that starts before the River client fetches a
// job and stops after it has stopped: in order, and in reverse.
func (b *Build) Around(s Service) { b.around = append(b.around, s) }

// Service records a service that starts once the River client runs and
// stops, in reverse order, before the client stops.
func (b *Build) Service(s Service) { b.services = append(b.services, s) }

// Leader records a runnable of the leader's (election.Elector.Register).
func (b *Build) Leader(name string, run Runnable) {
	b.leaders = append(b.leaders, leader{name: name, run: run})
}

// FencedLeader records a fenced runnable of the leader's
// (election.Elector.RegisterFenced).
func (b *Build) FencedLeader(name string, run Runnable) {
	b.leaders = append(b.leaders, leader{name: name, run: run, fenced: true})
}

// Driver is d, with the server's pilot (Build.Pilot) when a capability
// has set a part of it.
func (b *Build) Driver(d riverdriver.Driver[pgx.Tx]) riverdriver.Driver[pgx.Tx] {
	if b.Pilot == nil || !b.Pilot.Set() {
		return d
	}
	return pilot.NewDriver(d, b.Pilot)
}

// Ready records a readiness check of /readyz: an error says why the
// process is not ready.
func (b *Build) Ready(check func(context.Context) error) {
	b.ready = append(b.ready, check)
}

// Page is an admin console page that a capability contributes: served
// at /admin/<Name> and linked in the console's navigation as Title, its
// content rendered by Template over what Data returns, and the same value
// as JSON at /admin/api/<Name>. Template is html/template text, with the
// console's template functions (utc, rel, has …); the value is .Data in
// it. Data runs under the console's bound of a request (10 s).
type Page struct {
	Name     string
	Title    string
	Template string
	Data     func(ctx context.Context) (any, error)
	// Item, when set, serves one item of the page's at /admin/<Name>/<id>
	// (rendered by ItemTemplate, .Data its value) and as JSON at
	// /admin/api/<Name>/<id>; an error that wraps ErrNoItem answers 404.
	Item         func(ctx context.Context, id string) (any, error)
	ItemTemplate string
}

// ErrNoItem is an item a Page does not have: its Item's error answers
// 404.
var ErrNoItem = errors.New("no such item")

// Page records an admin console page.
func (b *Build) Page(p Page) { b.pages = append(b.pages, p) }

// Pages are the admin console pages recorded, in order.
func (b *Build) Pages() []Page { return slices.Clone(b.pages) }

// Step is a Service whose Start does fn and whose Stop does nothing: a
// step of the start, such as publishing what this worker declares.
func Step(fn func(context.Context) error) Service { return step(fn) }

type step func(context.Context) error

func (s step) Start(ctx context.Context) error { return s(ctx) }
func (step) Stop()                             {}

// WorkMiddleware is the recorded middleware, outermost first: by layer,
// then in the order recorded.
func (b *Build) WorkMiddleware() []rivertype.Middleware {
	sorted := slices.Clone(b.middleware)
	slices.SortStableFunc(sorted, func(x, y placed) int { return int(x.layer) - int(y.layer) })
	out := make([]rivertype.Middleware, len(sorted))
	for i, p := range sorted {
		out[i] = p.mw
	}
	return out
}

// WrapJobContext is every recorded job-context wrapper, applied in order
// (nil when none was recorded).
func (b *Build) WrapJobContext() func(context.Context) context.Context {
	wraps := slices.Clone(b.jobContext)
	if len(wraps) == 0 {
		return nil
	}
	return func(ctx context.Context) context.Context {
		for _, w := range wraps {
			ctx = w(ctx)
		}
		return ctx
	}
}

// AroundServices and Services are the recorded services, in order.
func (b *Build) AroundServices() []Service { return slices.Clone(b.around) }

// Services are the services recorded with Service, in order.
func (b *Build) Services() []Service { return slices.Clone(b.services) }

// RegisterLeaders registers every recorded leader runnable on r (the
// election.Elector), in order.
func RegisterLeaders[R ~func(context.Context) error](b *Build, r Registrar[R]) {
	for _, l := range b.leaders {
		if l.fenced {
			r.RegisterFenced(l.name, R(l.run))
		} else {
			r.Register(l.name, R(l.run))
		}
	}
}

// CheckReady runs the readiness checks in order and returns the first
// failure.
func (b *Build) CheckReady(ctx context.Context) error {
	for _, check := range b.ready {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return nil
}
