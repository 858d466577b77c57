package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/ferryq/ferry/internal/base/redact"
)

// LockKey is the session advisory lock (single bigint form) that serialises
// every ferry migration run in a database. It is part of ferry's advisory key
// table (see the election package).
const LockKey int64 = 8110731

// Lines, in the order they are applied going up.
const (
	LineRiver = "river"
	LineFerry = "ferry"
)

//go:embed *.sql
var files embed.FS

// Migration is one of ferry's own numbered migrations.
type Migration struct {
	Version int
	Name    string
	Up      string
	Down    string
}

var fileRE = regexp.MustCompile(`^(\d{3})_([a-z0-9_]+)\.(up|down)\.sql$`)

// All returns ferry's own migrations in version order. It panics if the
// embedded files are malformed, which a test catches at build time.
func All() []Migration {
	ms, err := load(files)
	if err != nil {
		panic(err)
	}
	return ms
}

func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileRE.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: file %q is not named NNN_name.up.sql or NNN_name.down.sql", e.Name())
		}
		version, _ := strconv.Atoi(m[1])
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		mig := byVersion[version]
		if mig == nil {
			mig = &Migration{Version: version, Name: strings.ReplaceAll(m[2], "_", " ")}
			byVersion[version] = mig
		}
		if mig.Name != strings.ReplaceAll(m[2], "_", " ") {
			return nil, fmt.Errorf("migrations: version %d has two names, %q and %q", version, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	out := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migrations: version %d (%s) needs both an up and a down file", m.Version, m.Name)
		}
		out = append(out, *m)
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migrations: versions must be 1, 2, 3 … without gaps; found %d at position %d", m.Version, i+1)
		}
	}
	return out, nil
}

// Status is one migration of either line and whether it is applied.
type Status struct {
	Line      string     `json:"line"`
	Version   int        `json:"version"`
	Name      string     `json:"name"`
	Applied   bool       `json:"applied"`
	AppliedAt *time.Time `json:"applied_at,omitempty"`
}

// Applied is one migration that a run applied or reverted.
type Applied struct {
	Line     string        `json:"line"`
	Version  int           `json:"version"`
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
}

// ErrSchemaBehind is returned (wrapped in a *BehindError) by Check when the
// database lacks migrations that this build knows.
var ErrSchemaBehind = errors.New("database schema is behind this build")

// BehindError lists the migrations that are missing.
type BehindError struct {
	Pending []Status
}

// Error names how many migrations are pending and the first of them (the
// list is in Pending, and `worker migrate list` shows it).
func (e *BehindError) Error() string {
	if len(e.Pending) == 0 {
		return ErrSchemaBehind.Error()
	}
	first := e.Pending[0]
	if len(e.Pending) == 1 {
		return fmt.Sprintf("%s: 1 pending migration, %s/%03d %s", ErrSchemaBehind, first.Line, first.Version, first.Name)
	}
	return fmt.Sprintf("%s: %d pending migrations, the first %s/%03d %s", ErrSchemaBehind, len(e.Pending), first.Line, first.Version, first.Name)
}

func (e *BehindError) Unwrap() error { return ErrSchemaBehind }

// Migrator applies River's migrations (through rivermigrate) and then ferry's
// own, holding session advisory lock LockKey for the whole run so that two
// concurrent runs (two replicas started with --migrate, say) take turns.
type Migrator struct {
	pool   *pgxpool.Pool
	river  *rivermigrate.Migrator[pgx.Tx]
	ferry  []Migration
	logger *slog.Logger
	schema string
}

// Option configures a Migrator.
type Option func(*Migrator)

// InSchema migrates the deployment of FERRY_SCHEMA s (package
// internal/base/schema; "" is the default deployment): Up creates the schema
// when it is missing, checks that the pool's sessions find it first in
// their search_path, and names what Postgres keeps per database after it
// (migration 017). The pool's sessions must have that search_path
// (dburl.WithSearchPath).
func InSchema(s string) Option { return func(m *Migrator) { m.schema = s } }

// New returns a Migrator over pool. It logs each applied or reverted
// migration ("migrate: up", "migrate: down") to logger, which may be nil.
func New(pool *pgxpool.Pool, logger *slog.Logger, opts ...Option) (*Migrator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Migrator{pool: pool, ferry: All(), logger: logger}
	for _, opt := range opts {
		opt(m)
	}
	rm, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler), Schema: m.schema})
	if err != nil {
		return nil, fmt.Errorf("migrations: new river migrator: %w", err)
	}
	m.river = rm
	return m, nil
}

// prepareSchema creates the deployment's schema when it is missing and
// checks that conn's search_path finds it first; it tells migration 017
// the schema's name (ferry.schema, for the session).
func (m *Migrator) prepareSchema(ctx context.Context, conn *pgx.Conn) error {
	if m.schema != "" {
		if _, err := conn.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{m.schema}.Sanitize()); err != nil {
			return fmt.Errorf("migrations: create schema %s: %w", m.schema, err)
		}
		if err := CheckSchema(ctx, conn, m.schema); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, "SELECT set_config('ferry.schema', $1, false)", m.schema); err != nil {
		return fmt.Errorf("migrations: set ferry.schema: %w", err)
	}
	return nil
}

// CheckSchema returns an error unless the sessions of q find schema s
// first in their search_path ("" checks nothing): through a transaction
// pooler, which does not pass search_path on, the role's own search_path
// must name it.
func CheckSchema(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, s string) error {
	if s == "" {
		return nil
	}
	var cur *string
	if err := q.QueryRow(ctx, "SELECT current_schema()").Scan(&cur); err != nil {
		return fmt.Errorf("migrations: read the current schema: %w", err)
	}
	if cur == nil || *cur != s {
		got := "none"
		if cur != nil {
			got = *cur
		}
		return fmt.Errorf("FERRY_SCHEMA is %s but the sessions' current schema is %s: the schema is missing (run `worker migrate up`), or search_path does not reach Postgres (through a transaction pooler, set the role's: ALTER ROLE … SET search_path = %s)", s, got, s)
	}
	return nil
}

// withLock runs fn on a dedicated connection (not one of the pool's, so a
// pool of one connection still has one for River's migrator) that holds
// LockKey for the whole run.
func (m *Migrator) withLock(ctx context.Context, fn func(conn *pgx.Conn) error) (err error) {
	cc := m.pool.Config().ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = "ferry-migrate"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return fmt.Errorf("migrations: connect: %s", redact.Postgres(err.Error()))
	}
	defer func() {
		// Closing the session releases the lock even if ctx is done.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", LockKey); err != nil {
		return fmt.Errorf("migrations: take advisory lock %d: %w", LockKey, err)
	}
	return fn(conn)
}

const createTable = `CREATE TABLE IF NOT EXISTS ferry_migration (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Up applies every pending migration: River's first, then ferry's.
func (m *Migrator) Up(ctx context.Context) ([]Applied, error) {
	var out []Applied
	err := m.withLock(ctx, func(conn *pgx.Conn) error {
		if err := m.prepareSchema(ctx, conn); err != nil {
			return err
		}
		res, err := m.river.Migrate(ctx, rivermigrate.DirectionUp, nil)
		if err != nil {
			return fmt.Errorf("migrations: river up: %w", err)
		}
		for _, v := range res.Versions {
			out = append(out, m.logApplied("up", Applied{Line: LineRiver, Version: v.Version, Name: v.Name, Duration: v.Duration}))
		}
		if _, err := conn.Exec(ctx, createTable); err != nil {
			return fmt.Errorf("migrations: create ferry_migration: %w", err)
		}
		applied, err := ferryApplied(ctx, conn)
		if err != nil {
			return err
		}
		for _, mig := range m.ferry {
			if _, ok := applied[mig.Version]; ok {
				continue
			}
			start := time.Now()
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, mig.Up); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO ferry_migration (version, name) VALUES ($1, $2)", mig.Version, mig.Name)
				return err
			})
			if err != nil {
				return fmt.Errorf("migrations: ferry %03d_%s up: %w", mig.Version, mig.Name, err)
			}
			out = append(out, m.logApplied("up", Applied{Line: LineFerry, Version: mig.Version, Name: mig.Name, Duration: time.Since(start)}))
		}
		return nil
	})
	return out, err
}

// Down reverts the newest steps migrations, ferry's before River's; steps < 0
// reverts everything, leaving neither ferry's nor River's tables.
func (m *Migrator) Down(ctx context.Context, steps int) ([]Applied, error) {
	if steps == 0 {
		return nil, nil
	}
	var out []Applied
	err := m.withLock(ctx, func(conn *pgx.Conn) error {
		if err := CheckSchema(ctx, conn, m.schema); err != nil {
			return err
		}
		applied, err := ferryApplied(ctx, conn)
		if err != nil {
			return err
		}
		for i := len(m.ferry) - 1; i >= 0 && (steps < 0 || len(out) < steps); i-- {
			mig := m.ferry[i]
			if _, ok := applied[mig.Version]; !ok {
				continue
			}
			start := time.Now()
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, mig.Down); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "DELETE FROM ferry_migration WHERE version = $1", mig.Version)
				return err
			})
			if err != nil {
				return fmt.Errorf("migrations: ferry %03d_%s down: %w", mig.Version, mig.Name, err)
			}
			out = append(out, m.logApplied("down", Applied{Line: LineFerry, Version: mig.Version, Name: mig.Name, Duration: time.Since(start)}))
		}
		if steps >= 0 && len(out) >= steps {
			return nil
		}
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS ferry_migration"); err != nil {
			return fmt.Errorf("migrations: drop ferry_migration: %w", err)
		}
		opts := &rivermigrate.MigrateOpts{TargetVersion: -1}
		if steps > 0 {
			opts = &rivermigrate.MigrateOpts{MaxSteps: steps - len(out)}
		}
		res, err := m.river.Migrate(ctx, rivermigrate.DirectionDown, opts)
		if err != nil {
			return fmt.Errorf("migrations: river down: %w", err)
		}
		for _, v := range res.Versions {
			out = append(out, m.logApplied("down", Applied{Line: LineRiver, Version: v.Version, Name: v.Name, Duration: v.Duration}))
		}
		return nil
	})
	return out, err
}

func (m *Migrator) logApplied(direction string, a Applied) Applied {
	m.logger.Info("migrate: "+direction, "line", a.Line, "version", a.Version, "name", a.Name, "duration", a.Duration)
	return a
}

// Status lists every migration this build knows, River's then ferry's, with
// whether the database has it.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	existing, err := m.river.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: river versions: %w", err)
	}
	riverHave := map[int]bool{}
	for _, e := range existing {
		riverHave[e.Version] = true
	}
	var out []Status
	for _, v := range m.river.AllVersions() {
		out = append(out, Status{Line: LineRiver, Version: v.Version, Name: v.Name, Applied: riverHave[v.Version]})
	}
	applied, err := ferryApplied(ctx, m.pool)
	if err != nil {
		return nil, err
	}
	for _, mig := range m.ferry {
		s := Status{Line: LineFerry, Version: mig.Version, Name: mig.Name}
		if at, ok := applied[mig.Version]; ok {
			s.Applied, s.AppliedAt = true, &at
		}
		out = append(out, s)
	}
	return out, nil
}

// Check returns a *BehindError (which matches ErrSchemaBehind) when any
// migration of this build is missing from the database.
func (m *Migrator) Check(ctx context.Context) error {
	if err := CheckSchema(ctx, m.pool, m.schema); err != nil {
		return err
	}
	status, err := m.Status(ctx)
	if err != nil {
		return err
	}
	var pending []Status
	for _, s := range status {
		if !s.Applied {
			pending = append(pending, s)
		}
	}
	if len(pending) > 0 {
		return &BehindError{Pending: pending}
	}
	return nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func ferryApplied(ctx context.Context, conn querier) (map[int]time.Time, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('ferry_migration') IS NOT NULL").Scan(&exists); err != nil {
		return nil, fmt.Errorf("migrations: look for ferry_migration: %w", err)
	}
	out := map[int]time.Time{}
	if !exists {
		return out, nil
	}
	rows, err := conn.Query(ctx, "SELECT version, applied_at FROM ferry_migration")
	if err != nil {
		return nil, fmt.Errorf("migrations: read ferry_migration: %w", err)
	}
	var (
		v  int
		at time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&v, &at}, func() error { out[v] = at; return nil })
	if err != nil {
		return nil, fmt.Errorf("migrations: read ferry_migration: %w", err)
	}
	return out, nil
}
