package pglisten

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestRun(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	cc, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	listening := make(chan struct{}, 4)
	got := make(chan string, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		Run(ctx, Config{
			ConnConfig:  cc,
			Channel:     "pglisten_test",
			OnListening: func() { listening <- struct{}{} },
			OnNotify:    func(n *pgconn.Notification) { got <- n.Payload },
			Logger:      slog.New(slog.DiscardHandler),
			Name:        "test listener",
		})
	}()
	<-listening
	pool := pgtest.Pool(t)
	_, err = pool.Exec(ctx, "SELECT pg_notify('pglisten_test', 'hello')")
	require.NoError(t, err)
	select {
	case p := <-got:
		require.Equal(t, "hello", p)
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}

	// A killed session is reopened, and OnListening says so again.
	_, err = pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN %pglisten_test%' AND datname = current_database()")
	require.NoError(t, err)
	select {
	case <-listening:
	case <-time.After(10 * time.Second):
		t.Fatal("not reconnected")
	}
	cancel()
	<-done
}

func TestRun_UnreachableEndsWithContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cc, err := pgx.ParseConfig("postgres://x@127.0.0.1:" + strconv.Itoa(port) + "/x?connect_timeout=1")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start := time.Now()
	Run(ctx, Config{ConnConfig: cc, Channel: "c", Logger: slog.New(slog.DiscardHandler), Name: "test"})
	require.Less(t, time.Since(start), time.Minute, "Run returns when its context ends, even while reconnecting (a watchdog, not a measurement)")
}
