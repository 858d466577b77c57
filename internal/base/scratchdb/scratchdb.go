// Package scratchdb creates throwaway Postgres databases: for the tests
// (through pgtest), the chaos suite and the bench. It does not import
// testing, so commands can use it; pgtest wraps it for tests.
//
// # Databases
//
// New creates a database of its own on a server and returns its URL and a
// function that drops it. A migrated database is a clone of a template that
// holds ferry's migrations and River's; an empty one is for tests of the
// migrations themselves. Names are ferry_<program>_<pid>_<n>, where a test
// binary's program is test_<package> (ferry_test_e2e_4242_1), so that
// processes that run at once on one server never pick the same name, and a
// database left behind says who made it.
//
// # The template
//
// Cloning a database is much faster than migrating one, and every test
// package wants several. The template is named after a hash of the
// migrations (ferry's and River's), so a change to either makes a new one
// and a stale template is never cloned. It is built on first use on each
// server, under an advisory lock of the server's maintenance connection (so
// processes that start at once build it once), as a database named
// <template>_building that is renamed only once migrated: a crash mid-way
// never leaves a half-migrated template that later runs would trust.
// Templates of older migrations are dropped when a new one is built.
package scratchdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/migrations"
)

// ErrUnreachable wraps the error of a failed connection to the server, as
// opposed to a failure on it.
var ErrUnreachable = errors.New("scratchdb: cannot reach the server")

// connectTimeout bounds each connection to the server.
const connectTimeout = 10 * time.Second

// templateLock serialises template creation across processes. It is taken
// in the server's maintenance connection, not in any ferry database, in the
// two-int form so it cannot collide with ferry's single-key locks.
const templateLockClass, templateLockObj = 911, 100

// beforeClone, when set (by a test), runs between the template's check and
// its clone.
var beforeClone func(tmpl string)

// sqlstateNoDatabase is invalid_catalog_name: here, the template is gone.
const sqlstateNoDatabase = "3D000"

// maxCloneAttempts bounds how often New builds the template again after
// another run dropped it under it.
const maxCloneAttempts = 5

// templatePrefix starts the name of every template, of any migrations.
const templatePrefix = "ferry_test_tmpl_"

// New creates a database of its own on the server at serverURL (a
// postgres:// URL; its database is the one to connect to for CREATE
// DATABASE) and returns the new database's URL and a function that drops it
// (WITH (FORCE), so connections left open do not stop it). With migrated it
// is a clone of the migrated template, built on first use; without, it is
// empty. ctx bounds the creation, not the drop.
func New(ctx context.Context, serverURL string, migrated bool) (url string, drop func() error, err error) {
	conn, err := connect(ctx, serverURL)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	name := newName()
	url, err = dburl.WithDatabase(serverURL, name)
	if err != nil {
		return "", nil, err
	}
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if !migrated {
		if _, err := conn.Exec(ctx, create); err != nil {
			return "", nil, fmt.Errorf("scratchdb: create database %s: %w", name, err)
		}
	}
	// A run on a checkout with other migrations drops this template as
	// stale (it keeps one template per server); the clone then finds it
	// gone, builds it again and retries.
	for attempt := 1; migrated; attempt++ {
		tmpl := templateName()
		if err := ensureTemplate(ctx, conn, serverURL, tmpl); err != nil {
			return "", nil, err
		}
		if beforeClone != nil {
			beforeClone(tmpl)
		}
		_, err := conn.Exec(ctx, create+" TEMPLATE "+pgx.Identifier{tmpl}.Sanitize())
		if err == nil {
			break
		}
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != sqlstateNoDatabase || attempt == maxCloneAttempts {
			return "", nil, fmt.Errorf("scratchdb: create database %s: %w", name, err)
		}
	}
	drop = func() error {
		ctx := context.WithoutCancel(ctx)
		conn, err := connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return dropWith(ctx, conn, name)
	}
	return url, drop, nil
}

var seq atomic.Int64

var slugRE = regexp.MustCompile(`[^a-z0-9]+`)

// newName returns ferry_<program>_<pid>_<n>, a name no other process on
// this host picks, within Postgres's 63 bytes.
func newName() string {
	prog := strings.TrimSuffix(strings.ToLower(filepath.Base(os.Args[0])), ".exe")
	pkg, isTest := strings.CutSuffix(prog, ".test")
	prog = slugRE.ReplaceAllString(pkg, "_")
	if len(prog) > 20 {
		prog = prog[:20]
	}
	if isTest {
		prog = "test_" + prog
	}
	return fmt.Sprintf("ferry_%s_%d_%d", prog, os.Getpid(), seq.Add(1))
}

// connect opens a maintenance connection to the server.
func connect(ctx context.Context, serverURL string) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnreachable, err)
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
	return templatePrefix + hex.EncodeToString(h.Sum(nil))[:12]
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

// ensureTemplate builds the template tmpl on conn's server unless it exists.
func ensureTemplate(ctx context.Context, conn *pgx.Conn, serverURL, tmpl string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1, $2)", templateLockClass, templateLockObj); err != nil {
		return fmt.Errorf("scratchdb: lock template creation: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1, $2)", templateLockClass, templateLockObj) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", tmpl).Scan(&exists); err != nil {
		return fmt.Errorf("scratchdb: look for template: %w", err)
	}
	if exists {
		return nil
	}
	// Templates of older schemas are dead weight once the migrations moved
	// on; drop them (quietly: one still being cloned by another run stays).
	rows, err := conn.Query(ctx, "SELECT datname FROM pg_database WHERE datname LIKE $1 AND datname <> $2",
		strings.ReplaceAll(templatePrefix, "_", `\_`)+"%", tmpl)
	if err == nil {
		stale, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		for _, name := range stale {
			_ = dropWith(ctx, conn, name)
		}
	}
	building := tmpl + "_building"
	_ = dropWith(ctx, conn, building)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return fmt.Errorf("scratchdb: create template database: %w", err)
	}
	url, err := dburl.WithDatabase(serverURL, building)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("scratchdb: open template database: %w", err)
	}
	m, err := migrations.New(pool, nil)
	if err == nil {
		_, err = m.Up(ctx)
	}
	pool.Close()
	if err != nil {
		return fmt.Errorf("scratchdb: migrate template database: %w", err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return fmt.Errorf("scratchdb: rename template database: %w", err)
	}
	return nil
}

func dropWith(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("scratchdb: drop database %s: %w", name, err)
	}
	return nil
}
