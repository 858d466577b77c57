package netproxy_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/netproxy"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// echo is a line echo server.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, wait time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(wait))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

// A partition holds bytes back both ways without closing anything, and a
// heal delivers them; a connection opened during it waits for the heal.
func TestProxy_PartitionHoldsAndHeals(t *testing.T) {
	p, err := netproxy.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 5*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before the partition: %q, %v", got, err)
	}

	p.Partition()
	_, err = roundTrip(c, r, "two", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("during the partition: want a timeout (no reset, no data), got %v", err)
	}
	late, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a dial during the partition is accepted: %v", err)
	}
	defer late.Close()
	lr := bufio.NewReader(late)
	if _, err := roundTrip(late, lr, "three", 300*time.Millisecond); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a connection opened during the partition: want a timeout, got %v", err)
	}

	p.Heal()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the heal, what was held back: %q, %v", got, err)
	}
	_ = late.SetDeadline(time.Now().Add(5 * time.Second))
	if got, err := lr.ReadString('\n'); err != nil || got != "three\n" {
		t.Fatalf("after the heal, the late connection: %q, %v", got, err)
	}
}

// A Postgres session through a partition: the client's statement gets no
// answer and no error until its own timeout, and the server's session
// stays (nothing closed it), until the partition heals.
// proxied starts a proxy to the test package's server, closed when the
// test ends, and returns it with a connection config that goes through it.
func proxied(t *testing.T) (*netproxy.Proxy, *pgx.ConnConfig) {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	p, err := netproxy.Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	host, port, _ := net.SplitHostPort(p.Addr())
	n, _ := strconv.Atoi(port)
	cfg.Host, cfg.Port = host, uint16(n)
	return p, cfg
}

func TestProxy_PostgresSessionSurvivesAPartition(t *testing.T) {
	ctx := context.Background()
	p, cfg := proxied(t)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	p.Partition()
	qctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	err = conn.QueryRow(qctx, "SELECT 1").Scan(new(int))
	cancel()
	if err == nil {
		t.Fatal("a statement through a partition was answered")
	}
	direct, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	var alive bool
	if err := direct.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive); err != nil {
		t.Fatal(err)
	}
	if !alive {
		t.Fatal("the server's session ended during the partition: the proxy passed a close through")
	}
	p.Heal()
}

// A COMMIT whose reply DropReplyTo loses is committed on the server,
// while the client sees its connection end with no answer.
func TestProxy_DropReplyToCommit(t *testing.T) {
	ctx := context.Background()
	p, cfg := proxied(t)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	direct, err := pgx.Connect(ctx, pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(ctx)
	if _, err := direct.Exec(ctx, "CREATE TABLE IF NOT EXISTS netproxy_drop (v int)"); err != nil {
		t.Fatal(err)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO netproxy_drop VALUES (7)"); err != nil {
		t.Fatal(err)
	}
	var thens atomic.Int32
	p.DropReplyToThen([]byte("commit"), func() { thens.Add(1) })
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the COMMIT was answered")
	}
	if n := thens.Load(); n != 1 {
		t.Fatalf("then ran %d times before the client saw the loss, want 1", n)
	}
	var rows int
	if err := direct.QueryRow(ctx, "SELECT count(*) FROM netproxy_drop WHERE v = 7").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("the COMMIT whose reply was lost committed %d rows, want 1", rows)
	}
	// Disarmed: the next connection's statements are answered.
	again, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	if _, err := again.Exec(ctx, "commit"); err != nil {
		t.Fatalf("a later COMMIT: %v", err)
	}
	if n := thens.Load(); n != 1 {
		t.Fatalf("then ran %d times, want once", n)
	}
}
