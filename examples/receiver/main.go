// Command receiver is the demo webhook receiver that `go tool task up` runs
// beside the worker: it verifies each outbox delivery's signature, keeps the
// effect to once per event id, and logs what it received.
//
// A real receiver keeps the once-only rule in its database: a UNIQUE
// constraint on the event id, inserted in the same transaction as the effect
// (see outbox.Receive for Go receivers). This demo keeps it in memory.
package main

import (
	"cmp"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/ferryq/ferry/outbox"
)

func main() {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	secret := []byte(os.Getenv("DEMO_HOOK_SECRET"))
	addr := cmp.Or(os.Getenv("DEMO_RECEIVER_ADDR"), "127.0.0.1:8089")
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /hooks/demo", func(w http.ResponseWriter, r *http.Request) {
		id, body, err := outbox.Verify(r, secret, 5*time.Minute)
		if err != nil {
			log.Warn("demo receiver: refused", "error", err)
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		mu.Lock()
		first := !seen[id]
		seen[id] = true
		mu.Unlock()
		if !first {
			log.Info("demo receiver: duplicate delivery, effect skipped", "event_id", id)
			return
		}
		log.Info("demo receiver: received", "event_id", id, "topic", r.Header.Get("Ferry-Topic"), "payload", string(body))
	})
	log.Info("demo receiver: listening", "addr", addr)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := srv.ListenAndServe(); err != nil {
		log.Error("demo receiver: stopped", "error", err)
		os.Exit(1)
	}
}
