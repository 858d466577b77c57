// Package pgtest gives every test package a Postgres database of its own,
// cloned from a migrated template, over a real connection.
//
// The server comes from TEST_DATABASE_URL (default DefaultURL). A test that
// cannot reach it fails loudly with the reason; it never skips.
//
// Advisory locks and LISTEN/NOTIFY channels are per database, so packages that
// run in parallel (go test runs one process per package) never see each
// other's election locks or notifications.
//
// The databases are made by internal/base/scratchdb (the template, the
// names, the drop), which the bench and the chaos suite use too; pgtest
// ties them to a test's or a package's life.
package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/scratchdb"
)

// DefaultURL is used when TEST_DATABASE_URL is unset. It matches the role and
// database that scripts/pg-up creates.
const DefaultURL = "postgres://ferry:ferry@127.0.0.1:5432/ferry?sslmode=disable"

// ServerURL returns TEST_DATABASE_URL or DefaultURL.
func ServerURL() string {
	return cmp.Or(os.Getenv("TEST_DATABASE_URL"), DefaultURL)
}

var (
	pkgOnce sync.Once
	pkgURL  string
	pkgErr  error
	pkgDrop func() error
)

// URL returns the connection string of this test package's database,
// creating it on first use from the migrated template.
func URL(tb testing.TB) string {
	tb.Helper()
	pkgOnce.Do(func() {
		pkgURL, pkgDrop, pkgErr = scratch(context.Background(), true)
	})
	if pkgErr != nil {
		tb.Fatalf("pgtest: %v", pkgErr)
	}
	return pkgURL
}

// ExampleURL is URL for runnable examples, which get no testing.TB: when
// the database cannot be made it panics with the reason, in one line, and
// the example fails.
func ExampleURL() string {
	return URL(&exampleTB{})
}

var (
	examplePoolMu sync.Mutex
	examplePool   *pgxpool.Pool
)

// ExamplePool is a pool on this test package's database for runnable
// examples (ExampleURL): one per package, closed by Main after the tests.
func ExamplePool() *pgxpool.Pool {
	examplePoolMu.Lock()
	defer examplePoolMu.Unlock()
	if examplePool == nil {
		tb := &exampleTB{}
		examplePool = PoolFor(tb, ExampleURL())
		AtExit(tb.cleanup)
	}
	return examplePool
}

// exampleTB is just enough of a testing.TB for URL and PoolFor: it panics
// where a test would fail, and keeps its cleanups for cleanup.
type exampleTB struct {
	testing.TB
	cleanups []func()
}

func (*exampleTB) Helper() {}

func (*exampleTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

func (tb *exampleTB) Cleanup(fn func()) { tb.cleanups = append(tb.cleanups, fn) }

func (tb *exampleTB) cleanup() {
	for _, fn := range slices.Backward(tb.cleanups) {
		fn()
	}
}

// Pool returns a pool on this test package's database, closed when the test
// ends.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	return PoolFor(tb, URL(tb))
}

// PoolFor opens a pool on url, closed when the test ends.
func PoolFor(tb testing.TB, url string) *pgxpool.Pool {
	tb.Helper()
	return TracedPoolFor(tb, url, nil)
}

// TracedPoolFor is PoolFor whose connections report their queries to
// tracer (none when nil).
func TracedPoolFor(tb testing.TB, url string, tracer pgx.QueryTracer) *pgxpool.Pool {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("pgtest: parse url: %v", err)
	}
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		tb.Fatalf("pgtest: ping: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// NewDatabase creates a fresh database for one test and drops it when the
// test ends. With migrated it is a clone of the migrated template; without,
// it is empty (for migration tests).
func NewDatabase(tb testing.TB, migrated bool) string {
	tb.Helper()
	url, drop, err := scratch(context.Background(), migrated)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := drop(); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return url
}

// scratch creates a database on the test server (scratchdb.New), saying
// where the server comes from when it cannot be reached.
func scratch(ctx context.Context, migrated bool) (url string, drop func() error, err error) {
	url, drop, err = scratchdb.New(ctx, ServerURL(), migrated)
	if errors.Is(err, scratchdb.ErrUnreachable) {
		err = fmt.Errorf("%w (TEST_DATABASE_URL=%q); run `go tool task db` to start one", err, redact.Postgres(ServerURL()))
	}
	return url, drop, err
}

var (
	atExitMu sync.Mutex
	atExit   []func()
)

// AtExit registers fn to run in Main after the tests, before the leak check
// (the proctest harness removes its binaries this way).
func AtExit(fn func()) {
	atExitMu.Lock()
	defer atExitMu.Unlock()
	atExit = append(atExit, fn)
}

// Main runs the package's tests, drops the package database (if one was
// made), runs the AtExit functions, checks for leaked goroutines (goleak,
// with opts) when the tests passed, and exits. It is the whole of TestMain in
// every package, with or without a database.
func Main(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	atExitMu.Lock()
	for _, fn := range atExit {
		fn()
	}
	atExitMu.Unlock()
	if pkgDrop != nil {
		if err := pkgDrop(); err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		}
	}
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: leaked goroutines after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
