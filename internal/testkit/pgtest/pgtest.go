// Package pgtest gives every test package a Postgres database of its own,
// cloned from a migrated template, over a real connection.
//
// The server comes from TEST_DATABASE_URL (default DefaultURL). A test that
// cannot reach it fails loudly with the reason; it never skips.
//
// Advisory locks and LISTEN/NOTIFY channels are per database, so packages that
// run in parallel (go test runs one process per package) never see each
// other's election locks or notifications.
package pgtest

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"go.uber.org/goleak"

	"github.com/ferryq/ferry/internal/dburl"
	"github.com/ferryq/ferry/internal/redact"
	"github.com/ferryq/ferry/migrations"
)

// DefaultURL is used when TEST_DATABASE_URL is unset. It matches the role and
// database that scripts/pg-up creates.
const DefaultURL = "postgres://ferry:ferry@127.0.0.1:5432/ferry?sslmode=disable"

// templateLock serialises template creation across test processes. It is
// taken in the server's maintenance connection, not in any ferry database, in
// the two-int form so it cannot collide with ferry's single-key locks.
const templateLockClass, templateLockObj = 911, 100

// ServerURL returns TEST_DATABASE_URL or DefaultURL.
func ServerURL() string {
	return cmp.Or(os.Getenv("TEST_DATABASE_URL"), DefaultURL)
}

var (
	pkgOnce sync.Once
	pkgURL  string
	pkgErr  error
	pkgName string
)

// URL returns the connection string of this test package's database,
// creating it on first use from the migrated template.
func URL(tb testing.TB) string {
	tb.Helper()
	pkgOnce.Do(func() {
		pkgName = fmt.Sprintf("ferry_test_%s_%d", packageSlug(), os.Getpid())
		pkgURL, pkgErr = createFromTemplate(context.Background(), pkgName)
	})
	if pkgErr != nil {
		tb.Fatalf("pgtest: %v", pkgErr)
	}
	return pkgURL
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, url)
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
	ctx := context.Background()
	name := fmt.Sprintf("ferry_test_%s_%d_%d", packageSlug(), os.Getpid(), dbSeq.Add())
	var (
		url string
		err error
	)
	if migrated {
		url, err = createFromTemplate(ctx, name)
	} else {
		url, err = createEmpty(ctx, name)
	}
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() {
		if err := dropDatabase(context.Background(), name); err != nil {
			tb.Errorf("pgtest: %v", err)
		}
	})
	return url
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
	if pkgName != "" && pkgErr == nil {
		if err := dropDatabase(context.Background(), pkgName); err != nil {
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

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Add() int { c.mu.Lock(); defer c.mu.Unlock(); c.n++; return c.n }

var dbSeq counter

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

func packageSlug() string {
	// The test binary is named after the package (ferry.test, admin.test …).
	name := strings.TrimSuffix(strings.ToLower(baseName(os.Args[0])), ".test")
	name = slugRE.ReplaceAllString(name, "_")
	if len(name) > 20 {
		name = name[:20]
	}
	return name
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}

// connect opens a maintenance connection to the server.
func connect(ctx context.Context) (*pgx.Conn, error) {
	url := ServerURL()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the test Postgres (TEST_DATABASE_URL=%q): %w; run `go tool task db` to start one", redact.Postgres(url), err)
	}
	return conn, nil
}

// templateName changes whenever the migrations change, so a stale template is
// never reused.
func templateName() string {
	h := sha256.New()
	for _, m := range migrations.All() {
		fmt.Fprintf(h, "%d\x00%s\x00%s\x00", m.Version, m.Up, m.Down)
	}
	fmt.Fprint(h, riverVersionsFingerprint())
	return "ferry_test_tmpl_" + hex.EncodeToString(h.Sum(nil))[:12]
}

func createFromTemplate(ctx context.Context, name string) (string, error) {
	conn, err := connect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	tmpl := templateName()
	if err := ensureTemplate(ctx, conn, tmpl); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s from template: %w", name, err)
	}
	return dburl.WithDatabase(ServerURL(), name)
}

func createEmpty(ctx context.Context, name string) (string, error) {
	conn, err := connect(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return dburl.WithDatabase(ServerURL(), name)
}

func ensureTemplate(ctx context.Context, conn *pgx.Conn, tmpl string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", templateLockClass, templateLockObj); err != nil {
		return fmt.Errorf("lock template creation: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, $2)", templateLockClass, templateLockObj) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tmpl).Scan(&exists); err != nil {
		return fmt.Errorf("look for template: %w", err)
	}
	if exists {
		return nil
	}
	// Templates of older schemas are dead weight once the migrations moved
	// on; drop them (quietly: one still being cloned by another run stays).
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE 'ferry\\_test\\_tmpl\\_%' AND datname <> $1", tmpl)
	if err == nil {
		stale, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, name := range stale {
			_ = dropWith(ctx, conn, name)
		}
	}
	building := tmpl + "_building"
	_ = dropWith(ctx, conn, building)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	url, err := dburl.WithDatabase(ServerURL(), building)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("open template database: %w", err)
	}
	m, err := migrations.New(pool, nil)
	if err == nil {
		_, err = m.Up(ctx)
	}
	pool.Close()
	if err != nil {
		return fmt.Errorf("migrate template database: %w", err)
	}
	// Renamed only once complete, so a crash mid-way never leaves a
	// half-migrated template that later runs would trust.
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return fmt.Errorf("rename template database: %w", err)
	}
	return nil
}

func dropDatabase(ctx context.Context, name string) error {
	conn, err := connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return dropWith(ctx, conn, name)
}

func dropWith(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

func riverVersionsFingerprint() string {
	m, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		panic(err)
	}
	var b strings.Builder
	for _, v := range m.AllVersions() {
		fmt.Fprintf(&b, "%d:%s;", v.Version, v.Name)
	}
	return b.String()
}
