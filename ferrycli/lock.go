package ferrycli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/locks"
)

// ExitTempFail is the exit code of `enqueue lock run` when the lock is held
// by another holder after the wait, or was lost while the command ran:
// EX_TEMPFAIL, try again later.
const ExitTempFail = 75

// MaxLockTTL is the largest --ttl of `enqueue lock run`. The ttl is how long
// a holder that died without releasing (enqueue killed -9, its host gone)
// keeps everyone else waiting, and how long a holder cut off from Postgres
// lets CMD run after its last renewal (four fifths of it); a long CMD needs
// no long ttl, since the lock is renewed every ttl/3 while CMD runs.
const MaxLockTTL = 10 * time.Minute

// maxKillGrace bounds the time CMD gets between SIGTERM and SIGKILL after
// the lock is lost.
const maxKillGrace = 10 * time.Second

// exitError ends a command with a given exit code. With a nil Err, Run
// prints nothing (`lock run` passes its command's exit code on).
type exitError struct {
	Code int
	Err  error
}

func (e *exitError) Error() string {
	if e.Err == nil {
		return "exit status " + strconv.Itoa(e.Code)
	}
	return e.Err.Error()
}

func (e *exitError) Unwrap() error { return e.Err }

func enqueueLock() *cli.Command {
	return &cli.Command{
		Name:  "lock",
		Usage: "run a command while holding a named lock; list the held locks",
		Subcommands: []*cli.Command{
			enqueueLockRun(),
			enqueueLockList(),
		},
	}
}

func enqueueLockRun() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run CMD while holding the lock NAME, like flock(1) for a cluster",
		ArgsUsage: "NAME -- CMD [ARGS…]",
		Description: `Acquires NAME in ferry_lock (waiting up to --wait), runs CMD with the lock's
fencing token in FERRY_LOCK_TOKEN (and its name in FERRY_LOCK_NAME), renews
the lock every ttl/3 while CMD runs, and releases it when CMD ends. Put -- before
CMD so that CMD's own flags are not read as enqueue's.

Exit codes: CMD's own (128 + the signal when a signal ended it); 75 when
NAME is held by another holder after --wait (one line naming the holder) or
when the lock was lost while CMD ran (CMD gets SIGTERM at once, and SIGKILL
after half the time left before the database's expiry: a tenth of the ttl, at
most 10s, none when another holder may have it already); 2 on bad input and 1
when Postgres cannot be reached (CMD never runs in either case). If enqueue
itself is killed, CMD gets SIGTERM (on Linux) and the lock expires after its
ttl. The ttl is at most 10m: it is how long a dead holder blocks the lock, and
the lock is renewed while CMD runs, however long.

Only the fencing token guarantees exclusion of effects: an enqueue stopped past
the ttl cannot stop CMD in time. CMD fences its own writes to the same database
with the token: in its transaction, SELECT token = $FERRY_LOCK_TOKEN AND
expires_at > clock_timestamp() FROM ferry_lock WHERE name = $FERRY_LOCK_NAME
FOR SHARE (locks.Fence in Go).

Examples:
   enqueue lock run nightly-report -- ./build-report --since yesterday
   enqueue lock run deploy:db --ttl 2m --wait 10m -- ./migrate.sh`,
		Flags: []cli.Flag{
			databaseURLFlag(),
			durationFlag("ttl", "how long the lock outlives its holder's last renewal (1s to 10m)", locks.DefaultTTL, ""),
			durationFlag("wait", "how long to wait for a held lock (0: try once)", 0, ""),
		},
		Action: runLock,
	}
}

func runLock(c *cli.Context) error {
	if c.NArg() < 2 {
		return usageErrorf("lock run takes NAME -- CMD [ARGS…], got %d arguments", c.NArg())
	}
	name, argv := c.Args().First(), c.Args().Slice()[1:]
	if !locks.ValidName(name) {
		return usageErrorf("lock name %q: use 1 to 128 letters, digits and _.:-", name)
	}
	ttl, wait := c.Duration("ttl"), c.Duration("wait")
	if ttl < time.Second || ttl > MaxLockTTL {
		return usageErrorf("--ttl %s: must be at least 1s and at most %s (the ttl is how long a dead holder blocks the lock; renewals keep it while CMD runs)", ttl, MaxLockTTL)
	}
	if wait < 0 {
		return usageErrorf("--wait %s: must be 0 or more", wait)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return usageErrorf("command %q: %v", argv[0], err)
	}
	if wait > 0 {
		if err := needSession("enqueue lock run --wait"); err != nil {
			return err
		}
	}
	return withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		l, err := locks.New(pool, locks.Config{}).Acquire(ctx, name, locks.Options{TTL: ttl, Wait: wait})
		var held *locks.HeldError
		switch {
		case errors.As(err, &held):
			h := held.Holder
			return &exitError{Code: ExitTempFail, Err: fmt.Errorf("lock %s is held by %s (token %d, since %s, expires in %s)",
				name, h.Holder, h.Token, h.AcquiredAt.UTC().Format(time.RFC3339), h.ExpiresIn.Round(time.Millisecond))}
		case errors.Is(err, locks.ErrNotAcquired):
			// Not taken, with no holder to name: no attempt saw one (the
			// lock's row stayed locked by another transaction, or the
			// wait was shorter than the first attempt).
			return &exitError{Code: ExitTempFail, Err: err}
		case err != nil:
			return err
		}
		code, stopped, err := runHolding(ctx, c, l, path, argv)
		rerr := l.Release(context.WithoutCancel(ctx))
		switch {
		case err != nil:
			return err
		case stopped != "":
			return &exitError{Code: ExitTempFail, Err: fmt.Errorf("lock %s (token %d) lost while %s ran: %s", name, l.Token(), argv[0], stopped)}
		case rerr != nil && errors.Is(rerr, locks.ErrLost):
			// CMD ended as the lock was lost: say so, keep CMD's code.
			warnf(c, "lock %s (token %d) was lost as %s ended", name, l.Token(), argv[0])
		case rerr != nil:
			warnf(c, "release lock %s: %v (it expires within %s)", name, rerr, ttl)
		}
		if code == 0 {
			return nil
		}
		return &exitError{Code: code}
	})
}

// runHolding runs CMD while l is held. When the lock is lost, CMD gets
// SIGTERM at once, and SIGKILL after killGrace: before the database can give
// the lock to anyone else; stopped then says what CMD was sent. When ctx ends
// (SIGINT or SIGTERM to enqueue), CMD gets SIGTERM and enqueue waits for it.
func runHolding(ctx context.Context, c *cli.Context, l *locks.Lock, path string, argv []string) (code int, stopped string, err error) {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args = argv
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.App.Reader, c.App.Writer, c.App.ErrWriter
	if cmd.Stdin == nil {
		cmd.Stdin = os.Stdin
	}
	cmd.Env = append(os.Environ(), "FERRY_LOCK_TOKEN="+strconv.FormatInt(l.Token(), 10), "FERRY_LOCK_NAME="+l.Name())
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		return 0, "", fmt.Errorf("start %s: %w", argv[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var (
		kill  <-chan time.Time
		lostC = l.Lost()
		ended = ctx.Done()
	)
	for {
		select {
		case err := <-exited:
			return exitCodeOf(cmd, err), stopped, nil
		case <-lostC:
			lostC = nil
			if !errors.Is(context.Cause(l.Context()), locks.ErrLost) {
				continue
			}
			_ = cmd.Process.Signal(syscall.SIGTERM)
			grace := killGrace(time.Until(l.Expiry()))
			if grace <= 0 {
				_ = cmd.Process.Kill()
				stopped = "it was sent SIGTERM and SIGKILL at once (another holder may have the lock already)"
				continue
			}
			kill = time.After(grace)
			stopped = fmt.Sprintf("it was sent SIGTERM, and SIGKILL %s later if still running, before the lock's expiry", grace.Round(time.Millisecond))
		case <-kill:
			_ = cmd.Process.Kill()
		case <-ended:
			ended = nil
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
	}
}

// killGrace is how long CMD may take to end after SIGTERM once the lock is
// lost, given how long remains before the database can give the lock to
// another holder: half of it (the other half covers the signal's delivery
// and a busy host's late timer), at most maxKillGrace, and none when
// nothing remains. Lost at its local deadline, a lock has a fifth of its ttl
// left, so CMD gets a tenth; a holder that noticed late, or whose renewal
// found the lock taken, kills CMD at once.
func killGrace(left time.Duration) time.Duration {
	if left < 2*time.Millisecond {
		return 0
	}
	return min(left/2, maxKillGrace)
}

// exitCodeOf is the command's exit code, or 128 + the signal that ended it.
func exitCodeOf(cmd *exec.Cmd, err error) int {
	ps := cmd.ProcessState
	if ps == nil {
		return ExitFailure
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	if code := ps.ExitCode(); code >= 0 {
		return code
	}
	_ = err
	return ExitFailure
}

func enqueueLockList() *cli.Command {
	return &cli.Command{
		Name:  "list",
		Usage: "list the held locks: holder, fencing token, expiry",
		Description: `Reads ferry_lock: every lock whose expiry, by the database's clock, is still
to come. EXPIRES IN is measured on the database's clock too.

Examples:
   enqueue lock list
   enqueue lock list --json`,
		Flags: []cli.Flag{databaseURLFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageErrorf("lock list takes no arguments, got %q", c.Args().First())
			}
			var hs []locks.Holder
			err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
				hs, err = locks.List(ctx, pool)
				return err
			})
			if err != nil {
				return err
			}
			out := outputFrom(c)
			if out.json {
				if hs == nil {
					hs = []locks.Holder{}
				}
				return out.JSON(map[string]any{"locks": hs})
			}
			rows := make([][]string, 0, len(hs))
			for _, h := range hs {
				rows = append(rows, []string{h.Name, h.Holder, strconv.FormatInt(h.Token, 10),
					h.AcquiredAt.UTC().Format(time.RFC3339), h.ExpiresIn.Round(time.Millisecond).String()})
			}
			return out.Table([]string{"NAME", "HOLDER", "TOKEN", "SINCE", "EXPIRES IN"}, rows)
		},
	}
}
