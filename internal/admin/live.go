package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/ferryq/ferry/broadcast"
)

// EventsChannel is the broadcast channel on which ferry announces what
// changes the console's pages (a leader acquired or released); every
// replica's console listens to it.
const EventsChannel = "ferry.admin"

// Events is where the console's live updates come from: the process's
// broadcast Broker.
type Events interface {
	Subscribe(ctx context.Context, channels ...string) (*broadcast.Subscription, error)
}

// liveJS opens the event stream and, on each change or gap, fetches the
// page again and swaps its <main>: the page updates without a reload. A
// file of its own, so the Content-Security-Policy (default-src 'self')
// allows it with no inline script.
const liveJS = `"use strict";
(() => {
  if (!window.EventSource || !window.fetch) return;
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const r = await fetch(location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}});
      if (r.ok) {
        const doc = new DOMParser().parseFromString(await r.text(), "text/html");
        const next = doc.querySelector("main"), cur = document.querySelector("main");
        if (next && cur) cur.replaceWith(next);
        document.body.dataset.live = String(Number(document.body.dataset.live || 0) + 1);
      }
    } catch (e) {
      // the next event tries again
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  const es = new EventSource("/admin/events");
  es.addEventListener("change", refresh);
  es.addEventListener("gap", refresh);
})();
`

// keepAlive is how often an idle event stream gets a comment, so proxies
// keep it open.
const keepAlive = 25 * time.Second

func (s *Server) routeLive(mux *http.ServeMux) {
	mux.HandleFunc("GET /admin/live.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = w.Write([]byte(liveJS))
	})
	mux.HandleFunc("GET /admin/events", s.events)
}

// events streams server-sent events: "change" with the broadcast message
// as data, "gap" when some may have been missed. Without Events it answers
// 204, which tells the browser not to reconnect.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Events == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	sub, err := s.cfg.Events.Subscribe(r.Context(), EventsChannel)
	if err != nil {
		s.cfg.Logger.Warn("admin: live updates unavailable", "error", err)
		http.Error(w, "live updates unavailable", http.StatusServiceUnavailable)
		return
	}
	defer sub.Close()
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	if _, err := fmt.Fprint(w, ": live\n\n"); err != nil || rc.Flush() != nil {
		return
	}
	for {
		ctx, cancel := context.WithTimeout(r.Context(), keepAlive)
		ev, err := sub.Next(ctx)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			_, err = fmt.Fprint(w, ": ping\n\n")
		case err != nil:
			return
		case ev.Gap:
			_, err = fmt.Fprint(w, "event: gap\ndata: {}\n\n")
		default:
			_, err = fmt.Fprintf(w, "event: change\ndata: %s\n\n", ev.Data)
		}
		if err != nil || rc.Flush() != nil {
			return
		}
	}
}
