// Package admin serves ferry's operator HTTP surface: /healthz, /readyz,
// /metrics, JSON under /admin/api/ (Telegram bots, …), and (in later
// versions) River UI and ferry's own pages.
//
// FERRY_ADMIN_TOKEN protects everything but /healthz, given as a bearer token
// (Authorization: Bearer …) or as the password of HTTP basic auth (any user
// name), so a browser can log in. Without a token the server refuses to
// listen anywhere but a loopback address.
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Config configures the server.
type Config struct {
	// Addr is host:port; port 0 picks a free one (see Server.Addr).
	Addr string
	// Token, when set, is required on every path but /healthz.
	Token string
	// Gatherer is what /metrics exposes.
	Gatherer prometheus.Gatherer
	// Ready reports whether this process can do its work (database reachable,
	// schema at head); /readyz answers 503 with its error otherwise.
	Ready func(ctx context.Context) error
	// API serves each function's result as JSON at GET /admin/api/<name>.
	API    map[string]func(ctx context.Context) (any, error)
	Logger *slog.Logger
}

// Server is the admin HTTP server.
type Server struct {
	cfg  Config
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	once sync.Once
}

// ErrExposedWithoutToken is returned by New for a non-loopback address with
// no token.
var ErrExposedWithoutToken = errors.New("admin: refusing to listen on a non-loopback address without FERRY_ADMIN_TOKEN")

// New validates cfg and builds the server; Start listens.
func New(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Gatherer == nil {
		cfg.Gatherer = prometheus.NewRegistry()
	}
	if err := ValidateAddr(cfg.Addr, cfg.Token); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, done: make(chan struct{})}
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// ValidateAddr checks an admin address: host:port, and loopback unless a
// token is set.
func ValidateAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("admin: address %q is not host:port", addr)
	}
	if token == "" && !isLoopback(host) {
		return fmt.Errorf("%w (address %s)", ErrExposedWithoutToken, addr)
	}
	return nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Handler returns the routes, with authentication applied.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	for name, fn := range s.cfg.API {
		mux.HandleFunc("GET /admin/api/"+name, func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
			defer cancel()
			v, err := fn(ctx)
			w.Header().Set("Content-Type", "application/json")
			if err != nil {
				s.cfg.Logger.Warn("admin: api", "name", name, "error", err)
				w.WriteHeader(http.StatusInternalServerError)
				_ = json.NewEncoder(w).Encode(map[string]string{"error": "internal error; see the worker's log"})
				return
			}
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	return s.auth(mux)
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

func (s *Server) auth(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return next
	}
	want := []byte(s.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		var got string
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			got = b
		} else if _, p, ok := r.BasicAuth(); ok {
			got = p
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="ferry admin", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Start listens and serves in the background; it returns once the socket is
// bound, or with the bind error.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("admin: listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("admin: serve", "error", err)
		}
	}()
	s.cfg.Logger.Info("admin: listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the bound address (useful with port 0).
func (s *Server) Addr() string {
	if s.ln == nil {
		return s.cfg.Addr
	}
	return s.ln.Addr().String()
}

// Stop shuts the server down, waiting up to 5s for requests in flight. It is
// safe to call twice, and before Start.
func (s *Server) Stop() {
	if s.ln == nil {
		return
	}
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(ctx)
		<-s.done
	})
}
