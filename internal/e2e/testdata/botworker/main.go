// Command botworker is a test binary of the end-to-end tests
// (internal/e2e/telegram_test.go): a service that embeds ferry as a user's
// service would, with a Telegram command router for the bot "desk".
//
// It runs ferry.New + Run on DATABASE_URL (the admin server off, JSON logs on
// stderr, 1 s leader ticks and standby probes) until SIGTERM or SIGINT. The
// config file FERRY_CONFIG must name the bot "desk" (telegram.bots); the Bot
// API server is FERRY_TELEGRAM_API_URL. The router answers one command:
//
//	/echo words…  →  "words…"
//
// through ferry.Config.TelegramRouters, so its outbox route is
// "telegram-desk-commands".
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/telegram"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, log)
	stop()
	if err != nil {
		log.Error("botworker: stopped", "error", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger) error {
	router := telegram.NewRouter()
	router.Handle("/echo", func(_ context.Context, _ pgx.Tx, _ telegram.Update, args []string) (string, error) {
		return strings.Join(args, " "), nil
	})
	srv, err := ferry.New(ctx, ferry.Config{
		Database:   ferry.DatabaseConfig{URL: os.Getenv("DATABASE_URL")},
		Queues:     ferry.QueuesConfig{Workers: map[string]int{"default": 10, "outbox": 10}, FetchPollInterval: 100 * time.Millisecond, ShutdownGrace: 5 * time.Second},
		Leader:     ferry.LeaderConfig{Tick: time.Second, StandbyProbe: time.Second},
		Admin:      ferry.AdminConfig{Addr: "off"},
		Telegram:   ferry.TelegramConfig{APIURL: os.Getenv("FERRY_TELEGRAM_API_URL"), Routers: map[string]*telegram.Router{"desk": router}},
		ConfigFile: os.Getenv("FERRY_CONFIG"),
		Logger:     log,
	})
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}
