// Command contender is one process of the locks fencing oracle (package
// internal/testkit/lockoracle): it acquires the lock LOCK_NAME (ttl
// LOCK_TTL, waiting as long as it takes), writes two fenced rows to
// lock_oracle under it (acq, stamped with the acquisition's time, then
// rel), releases it, records the release (an unfenced released row), and
// starts again, until it is killed.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/locks"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "contender:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	ttl, err := time.ParseDuration(os.Getenv("LOCK_TTL"))
	if err != nil {
		return fmt.Errorf("LOCK_TTL: %w", err)
	}
	name := os.Getenv("LOCK_NAME")
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	me := fmt.Sprintf("contender:%d", os.Getpid())
	cfg.ConnConfig.RuntimeParams["application_name"] = me
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	c := locks.New(pool, locks.Config{Holder: me, PollInterval: time.Second})
	fmt.Println("contender: started")
	for {
		l, err := c.Acquire(ctx, name, locks.Options{TTL: ttl, Wait: locks.Forever})
		if err != nil {
			// Unavailable (a terminated backend): try again.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		for _, kind := range []string{"acq", "rel"} {
			if err := fencedWrite(ctx, pool, l, kind); err != nil {
				break
			}
		}
		if err := l.Release(ctx); err == nil {
			_, _ = pool.Exec(ctx, `INSERT INTO lock_oracle (token, pid, kind) VALUES ($1, $2, 'released')`, l.Token(), os.Getpid())
		} else if !errors.Is(err, locks.ErrLost) {
			fmt.Fprintln(os.Stderr, "contender: release:", err)
		}
	}
}

// fencedWrite inserts one row carrying the lock's token, fenced.
func fencedWrite(ctx context.Context, pool *pgxpool.Pool, l *locks.Lock, kind string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := l.Fence(ctx, tx); err != nil {
			return err
		}
		// The acq row is stamped with the acquisition's own time (the row
		// is this token's: the fence holds it), the others with the
		// database's clock now.
		_, err := tx.Exec(ctx, `INSERT INTO lock_oracle (token, pid, kind, at)
			SELECT $1, $2, $3::text, CASE WHEN $3::text = 'acq' THEN acquired_at ELSE clock_timestamp() END
			FROM ferry_lock WHERE name = $4`, l.Token(), os.Getpid(), kind, l.Name())
		return err
	})
}
