package jobs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/uniquestates"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/base/schema"
	"github.com/ferryq/ferry/internal/base/traceparent"
	"github.com/ferryq/ferry/seal"
)

// DBTX is what ferry's SQL runs on: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// InsertNotifyCooldown is the least time between two insert notifications
// that one inserting client sends for a queue: River's least fetch
// cooldown. A job inserted inside that window waits for the next
// notification (or the workers' poll); with the workers' own fetch
// cooldown (ferry's default is 1 ms too) it sets pickup: at 5 ms each,
// p50 4.5 ms at 500 jobs/s, at 1 ms each 1.6 ms (docs/tuning.md).
const InsertNotifyCooldown = river.FetchCooldownMin

// MaxArgsBytes is the largest args document ferry accepts at insert.
const MaxArgsBytes = 64 << 10

// Builtin returns the kinds that ship in this package.
func Builtin() []Kind {
	return []Kind{
		Define[NoopArgs](&NoopWorker{}, river.QueueDefault, "does nothing (or sleeps for args.sleep); for smoke tests and benchmarks"),
		Define[HTTPRequestArgs](&HTTPRequestWorker{}, river.QueueDefault, "one HTTP call; 2xx completes, 408/429/5xx retry, other 4xx cancel"),
	}
}

// Inserter inserts jobs from Go services, inside their own transactions. It
// wraps an insert-only River client: it works no jobs and needs no queues.
//
//	ins, _ := jobs.NewInserter(pool)
//	tx, _ := pool.Begin(ctx)
//	res, err := ins.InsertTx(ctx, tx, jobs.HTTPRequestArgs{URL: "http://app/warm"}, nil)
//	// … the service's own writes in tx …
//	tx.Commit(ctx) // the job exists if and only if this commits
type Inserter struct {
	client     *river.Client[pgx.Tx]
	middleware []rivertype.JobInsertMiddleware // the client's, for EncodeCopy
	schema     string                          // FERRY_SCHEMA's, "" for the search path
}

// InserterOption configures an Inserter.
type InserterOption func(*inserterOptions)

type inserterOptions struct {
	keys      *seal.Keys
	keysSet   bool
	schema    string
	schemaSet bool
}

// WithSchema makes the Inserter insert into the deployment of FERRY_SCHEMA
// s (River qualifies its tables and notifies the workers there), instead
// of the one FERRY_SCHEMA names in the environment. The caller's
// transactions must find that schema's tables first too: set search_path
// in the pool's URL (?search_path=s), which ferry's own checks (bounded
// queues) and outbox.Add rely on.
func WithSchema(s string) InserterOption {
	return func(o *inserterOptions) { o.schema, o.schemaSet = s, true }
}

// WithSealKeys makes the Inserter seal every job with keys' first key
// (package seal), instead of with the keys of FERRY_SEAL_KEYS. nil keys
// seal nothing.
func WithSealKeys(keys *seal.Keys) InserterOption {
	return func(o *inserterOptions) { o.keys, o.keysSet = keys, true }
}

// NewInserter returns an Inserter over pool (used only for Insert without a
// transaction; InsertTx uses the caller's tx). It seals every job it
// inserts with the keys of FERRY_SEAL_KEYS (seal.EnvKeys), or those of
// WithSealKeys; a bad FERRY_SEAL_KEYS is an error. It inserts into the
// deployment of FERRY_SCHEMA, or of WithSchema; a bad name is an error.
func NewInserter(pool *pgxpool.Pool, opts ...InserterOption) (*Inserter, error) {
	var o inserterOptions
	for _, opt := range opts {
		opt(&o)
	}
	if !o.keysSet {
		keys, err := seal.FromEnv()
		if err != nil {
			return nil, fmt.Errorf("jobs: new inserter: %w", err)
		}
		o.keys = keys
	}
	if !o.schemaSet {
		o.schema = os.Getenv(schema.Env)
	}
	s, err := schema.Parse(o.schema)
	if err != nil {
		return nil, fmt.Errorf("jobs: new inserter: %w", err)
	}
	mw := Middleware(o.keys)
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		// An inserting client NOTIFYs workers at most once per FetchCooldown
		// per queue. River's default (100 ms) leaves jobs inserted in between
		// waiting for the workers' poll: pickup p99 ~94 ms measured, against
		// ~6 ms with 1 ms (docs/tuning.md).
		FetchCooldown: InsertNotifyCooldown,
		Middleware:    mw,
		Schema:        s,
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: new inserter: %w", err)
	}
	ins := &Inserter{client: c, schema: s}
	for _, m := range mw {
		ins.middleware = append(ins.middleware, m.(rivertype.JobInsertMiddleware)) //nolint:forcetypeassert // Middleware's are all insert middleware
	}
	return ins, nil
}

// Client is the underlying insert-only River client, for River's other insert
// APIs (InsertManyTx, InsertManyFastTx).
func (i *Inserter) Client() *river.Client[pgx.Tx] { return i.client }

// InsertTx inserts one job in tx. Args that implement Validate() error are
// validated first, and args over MaxArgsBytes are refused.
func (i *Inserter) InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	if err := CheckArgs(args); err != nil {
		return nil, err
	}
	c := &collapses{}
	res, err := i.client.InsertTx(context.WithValue(ctx, collapsesKey{}, c), tx, args, opts)
	if err != nil {
		return nil, fmt.Errorf("jobs: insert %s: %w", args.Kind(), AsQueueFull(err))
	}
	if err := i.debounceTx(ctx, tx, c, []*rivertype.JobInsertResult{res}); err != nil {
		return nil, err
	}
	return res, nil
}

// InsertManyTx inserts many jobs in tx in one statement, each checked as
// InsertTx checks one. It inserts all of them or none: a queue that cannot
// take them all refuses the whole statement (ErrQueueFull).
func (i *Inserter) InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	for _, p := range params {
		if err := CheckArgs(p.Args); err != nil {
			return nil, err
		}
	}
	c := &collapses{}
	res, err := i.client.InsertManyTx(context.WithValue(ctx, collapsesKey{}, c), tx, params)
	if err != nil {
		return nil, fmt.Errorf("jobs: insert %d jobs: %w", len(params), AsQueueFull(err))
	}
	if err := i.debounceTx(ctx, tx, c, res); err != nil {
		return nil, err
	}
	return res, nil
}

// CheckArgs validates args (when they have a Validate method) and their
// encoded size.
func CheckArgs(args river.JobArgs) error {
	if v, ok := args.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return err
		}
	}
	b, err := json.Marshal(args)
	if err != nil {
		return fmt.Errorf("jobs: encode %s args: %w", args.Kind(), err)
	}
	if len(b) > MaxArgsBytes {
		return fmt.Errorf("jobs: %s args are %d bytes, over the %d byte limit", args.Kind(), len(b), MaxArgsBytes)
	}
	return nil
}

// RawArgs carries a kind name and args already encoded as a JSON object, for
// inserters that don't have the Go type (the enqueue CLI, bridges).
type RawArgs struct {
	KindName string
	JSON     json.RawMessage
}

// Kind implements river.JobArgs.
func (r RawArgs) Kind() string { return r.KindName }

// MarshalJSON returns the args as given.
func (r RawArgs) MarshalJSON() ([]byte, error) { return r.JSON, nil }

// ArgsError is args that ParseRaw refuses as args: over MaxArgsBytes, not
// a JSON object, or, for a built-in kind, not decoding into the kind's args
// (an unknown field, a value of the wrong type). Its message names the
// args ("args are …", "args must be …", "args do not fit …"). An error of
// the args' own Validate method is returned as it is, not as an
// *ArgsError.
type ArgsError struct {
	// Kind is the job kind the args were given for.
	Kind string
	// Err says what is wrong. Where its message quotes the JSON library's
	// error (a *json.SyntaxError, the decoder's error of a built-in kind's
	// args), it wraps it.
	Err error
}

func (e *ArgsError) Error() string { return e.Err.Error() }
func (e *ArgsError) Unwrap() error { return e.Err }

// ParseRaw checks that raw is a JSON object within MaxArgsBytes and, for a
// built-in kind, that it decodes into the kind's args with no unknown field
// and passes their validation. Args it refuses as args are an *ArgsError.
func ParseRaw(kind string, raw []byte) (RawArgs, error) {
	argsErr := func(format string, args ...any) (RawArgs, error) {
		return RawArgs{}, &ArgsError{Kind: kind, Err: fmt.Errorf(format, args...)}
	}
	if len(raw) > MaxArgsBytes {
		return argsErr("args are %d bytes, over the %d byte limit", len(raw), MaxArgsBytes)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return argsErr("args must be a JSON object: %w", notObject(raw, err))
	}
	var typed river.JobArgs
	switch kind {
	case NoopArgs{}.Kind():
		typed = &NoopArgs{}
	case HTTPRequestArgs{}.Kind():
		typed = &HTTPRequestArgs{}
	}
	if typed != nil {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(typed); err != nil {
			return argsErr("args do not fit %s: %w", kind, err)
		}
		if v, ok := typed.(interface{ Validate() error }); ok {
			if err := v.Validate(); err != nil {
				return RawArgs{}, err
			}
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return argsErr("args must be a JSON object: %w", err)
	}
	return RawArgs{KindName: kind, JSON: compact.Bytes()}, nil
}

// notObject says why raw, which failed to decode into a map with err (nil
// when raw is a JSON null), is not a JSON object.
func notObject(raw []byte, err error) error {
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typeErr):
		return errors.New("got a JSON " + typeErr.Value)
	case err != nil:
		return err // a *json.SyntaxError
	}
	t := strings.TrimSpace(string(raw))
	if len(t) > 20 {
		t = t[:20] + "…"
	}
	return errors.New("got " + t)
}

// uniqueKeyMeta is the metadata key that carries a caller's unique key.
const uniqueKeyMeta = "ferry_unique_key"

// WithUniqueKey returns opts (or new opts) marked with a caller-chosen unique
// key: while a job of the same kind with the same key is pending, scheduled,
// available, running, retryable or completed (River's default unique states;
// completed jobs are cleaned after 24h), inserting another returns the
// existing job instead (JobInsertResult.UniqueSkippedAsDuplicate).
//
// The key is turned into River's unique_key by UniqueKeyMiddleware, which
// every River client ferry builds installs: an Inserter's, the server's
// (ferry.Server.River, which the scheduler and Telegram insert with), and
// the insert-only one its outbox relay inserts with. A River client of
// your own must install it too; one without it inserts the job with no
// uniqueness at all.
func WithUniqueKey(opts *river.InsertOpts, key string) *river.InsertOpts {
	return withMetadata(opts, uniqueKeyMeta, key)
}

// withMetadata returns a copy of opts (or new opts) whose metadata has
// name set to value, the caller's opts unchanged.
func withMetadata(opts *river.InsertOpts, name string, value any) *river.InsertOpts {
	var o river.InsertOpts
	if opts != nil {
		o = *opts
	}
	meta := map[string]any{}
	if len(o.Metadata) > 0 {
		_ = json.Unmarshal(o.Metadata, &meta)
	}
	meta[name] = value
	o.Metadata, _ = json.Marshal(meta)
	return &o
}

// Middleware is the insert middleware every River client ferry builds
// installs: the trace context's (the inserting context's W3C traceparent
// and tracestate go into each job's metadata, so that the worker's span
// joins the caller's trace; nothing when the context holds no span),
// UniqueKeyMiddleware, then, with keys, the seal's (seal.Middleware), which
// seals what the unique key step leaves.
func Middleware(keys *seal.Keys) []rivertype.Middleware {
	mw := []rivertype.Middleware{traceparent.InsertMiddleware(), &uniqueKeyMiddleware{sealed: keys != nil}}
	if m := seal.Middleware(keys); m != nil {
		mw = append(mw, m)
	}
	return mw
}

// UniqueKeyMiddleware returns the River insert middleware that makes
// WithUniqueKey work: it turns the key an insert carries into River's
// unique_key and unique_states, so River's own unique index enforces it on
// every insert path of the client (Insert, InsertTx, InsertMany,
// InsertManyTx; the InsertManyFast paths refuse a duplicate with an error, as
// River documents). Install it in river.Config.Middleware of every client
// that may insert a job with a key. It also turns an insert refused by a
// queue's bound into a *QueueFullError (AsQueueFull).
func UniqueKeyMiddleware() rivertype.Middleware { return &uniqueKeyMiddleware{} }

type uniqueKeyMiddleware struct {
	river.MiddlewareDefaults
	sealed bool // the client seals what it inserts: no debounce
}

var _ rivertype.JobInsertMiddleware = (*uniqueKeyMiddleware)(nil)

func (m *uniqueKeyMiddleware) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	var debounces map[int]debounce
	for i, p := range params {
		if len(p.Metadata) == 0 {
			continue
		}
		if bytes.Contains(p.Metadata, []byte(debounceMeta)) {
			d, ok, err := debounced(p.Metadata)
			if err != nil {
				return nil, err
			}
			if ok {
				if m.sealed {
					return nil, errors.New("jobs: a debounced insert cannot be sealed (a collapse changes the args and the due time the seal covers)")
				}
				debounceParams(p, d)
				if debounces == nil {
					debounces = map[int]debounce{}
				}
				debounces[i] = d
				continue
			}
		}
		if !bytes.Contains(p.Metadata, []byte(uniqueKeyMeta)) {
			continue
		}
		var meta map[string]any
		if err := json.Unmarshal(p.Metadata, &meta); err != nil {
			continue
		}
		key, ok := meta[uniqueKeyMeta].(string)
		if !ok || key == "" {
			continue
		}
		sum := sha256.Sum256([]byte("ferry:" + p.Kind + ":" + key))
		p.UniqueKey = sum[:]
		p.UniqueStates = uniquestates.UniqueStatesToBitmask(rivertype.UniqueOptsByStateDefault())
	}
	// The insert runs inside doInner: an insert refused by a queue's bound
	// comes back as a *QueueFullError from every client that installs this
	// middleware, so errors.Is(err, ErrQueueFull) holds on River's own
	// Insert and InsertMany calls too.
	res, err := doInner(ctx)
	if err != nil || len(debounces) == 0 {
		return res, AsQueueFull(err)
	}
	// A debounced insert that found its key's job collapses into it, in
	// the Inserter's transaction (debounceTx).
	c, _ := ctx.Value(collapsesKey{}).(*collapses)
	for i, d := range debounces {
		if i >= len(res) || !res[i].UniqueSkippedAsDuplicate {
			continue
		}
		if c == nil {
			return nil, fmt.Errorf("jobs: debounce %q: only an Inserter's InsertTx and InsertManyTx debounce", d.Key)
		}
		c.list = append(c.list, collapse{job: res[i].Job.ID, args: params[i].EncodedArgs, d: d})
	}
	return res, nil
}
