package admin

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/riverqueue/river/rivershared/startstop"

	"github.com/ferryq/ferry/internal/capability"
)

// Config configures the server.
type Config struct {
	// Addr is host:port; port 0 picks a free one (see Server.Addr).
	Addr string
	// Token, when set, is required on every path but /healthz and
	// /readyz: given once on the sign-in page (a session cookie follows),
	// or on every request (Authorization: Bearer, for scripts). /readyz
	// answers without it, so that probes which cannot send a secret (a
	// kubelet's) can read it, but says why it is not ready only to a
	// request that carries it.
	Token string
	// Replica names this process (its worker name); the pages and the
	// Ferry-Replica header of every signed-in answer say which replica
	// answered.
	Replica string
	// Gatherer is what /metrics exposes.
	Gatherer prometheus.Gatherer
	// Ready reports whether this process can do its work (database reachable,
	// schema at head); /readyz answers 503 otherwise, with its error to a
	// request that passed authentication.
	Ready func(ctx context.Context) error
	// Console feeds ferry's pages under /admin/ and their JSON under
	// /admin/api/; without it they are not served.
	Console Console
	// RiverUI, when set, is served under /riverui/. It must be built with
	// the prefix "/riverui" (riverui.HandlerOpts.Prefix).
	RiverUI http.Handler
	// Events, when set, updates the pages live (/admin/events, server-sent
	// events fed by EventsChannel).
	Events Events
	// Pages are the capabilities' pages, after ferry's own in the
	// navigation (with Console only).
	Pages  []capability.Page
	Logger *slog.Logger
}

// Server is the admin HTTP server.
type Server struct {
	cfg Config
	// csrf is the token ferry's forms carry: HMAC-SHA256(key, "csrf") with
	// a key derived from the admin token (HKDF; the same on every replica,
	// and it reveals nothing of the token), or without a token a random key
	// made in New.
	csrf string
	// sessionKey signs sign-in sessions; derived from Config.Token, so
	// every replica with the same token accepts the same sessions (nil
	// without a token).
	sessionKey []byte
	pages      map[string]*template.Template
	now        func() time.Time
	// handler is built once in New; each Start serves it on a new listener.
	handler http.Handler

	// BaseStartStop gives the server ferry's one lifecycle shape: Start,
	// Stop (safe twice, and without Start), Started, Stopped.
	startstop.BaseStartStop

	mu sync.Mutex
	ln net.Listener // while started
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
	s := &Server{cfg: cfg, now: time.Now}
	// With a token, the CSRF key and the session key are derived from it,
	// so a form or a session one replica made is good on every replica
	// with the same token. Without one, the CSRF key is random.
	key := make([]byte, 32)
	if cfg.Token != "" {
		var err error
		if key, err = deriveKey(cfg.Token, csrfInfo); err != nil {
			return nil, err
		}
		if s.sessionKey, err = deriveKey(cfg.Token, sessionInfo); err != nil {
			return nil, err
		}
	} else if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("admin: make the CSRF key: %w", err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("csrf"))
	s.csrf = hex.EncodeToString(mac.Sum(nil))
	var err error
	if s.pages, err = parsePages(cfg.Pages); err != nil {
		return nil, err
	}
	s.handler = s.Handler()
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

// Handler returns the routes, with authentication and the cross-site
// checks applied.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Gatherer, promhttp.HandlerOpts{}))
	if s.cfg.RiverUI != nil {
		mux.Handle("/riverui/", s.cfg.RiverUI)
		mux.Handle("/riverui", s.cfg.RiverUI) // River UI redirects to /riverui/
	}
	mux.HandleFunc("GET "+loginPath, s.login)
	mux.HandleFunc("POST "+loginPath, s.login)
	mux.HandleFunc("POST /admin/logout", s.logout)
	if s.cfg.Console != nil {
		s.routePages(mux)
		s.routeLive(mux)
	}
	return secure(s.auth(s.sameOrigin(s.replica(mux))))
}

// replica names the replica that answered in the Ferry-Replica header, on
// every answer that passed authentication.
func (s *Server) replica(next http.Handler) http.Handler {
	if s.cfg.Replica == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Ferry-Replica", s.cfg.Replica)
		next.ServeHTTP(w, r)
	})
}

// secure sets the headers every answer carries: no framing (River UI's
// buttons included), no Referer to other sites, no content sniffing. The
// pages add their Content-Security-Policy.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			if s.cfg.Token != "" && !s.signedIn(r) && !s.hasToken(r) {
				// A probe without the token learns the state, not
				// the reason: that may name the database's host.
				_, _ = w.Write([]byte("not ready\n"))
				return
			}
			_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
			return
		}
	}
	_, _ = w.Write([]byte("ready\n"))
}

// auth requires the token on every path but /healthz and /readyz (which
// gives its reason only with the token). Without a token it requires a
// loopback Host instead, on every path but /healthz: the server listens on
// loopback only then, and a name that resolves there (DNS rebinding) must
// not let a web page read or drive it.
//
// With a token, a request passes with a valid session cookie (a browser,
// after the sign-in page) or with the token itself (a script: bearer, or
// the password of basic auth). Any other request for a page from a browser
// is sent to the sign-in page; the rest are answered 401.
func (s *Server) auth(next http.Handler) http.Handler {
	if s.cfg.Token == "" {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" && !isLoopback(hostOf(r.Host)) {
				http.Error(w, "forbidden: without FERRY_ADMIN_TOKEN only loopback host names are served", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz" || r.URL.Path == "/readyz" || r.URL.Path == loginPath:
		case s.signedIn(r) || s.hasToken(r):
		case wantsPage(r):
			toLogin(w, r)
			return
		default:
			w.Header().Set("WWW-Authenticate", `Bearer realm="ferry admin"`)
			http.Error(w, "unauthorized: sign in at "+loginPath+", or send the admin token as Authorization: Bearer", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses (403) a request that may change state (any method but
// GET, HEAD and OPTIONS) when the browser says it comes from another origin:
// net/http's CrossOriginProtection (Sec-Fetch-Site, or without it an Origin
// whose host is not the request's Host), and, from a browser that sends
// neither header, a Referer whose host is not the request's Host. A request
// with none of them (curl, a script) passes: it carries the token, which a
// cross-site page cannot attach. ferry's forms check their CSRF token on
// top of this.
func (s *Server) sameOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := cop.Check(r)
		if err == nil {
			err = checkReferer(r)
		}
		if err != nil {
			s.cfg.Logger.Warn("admin: cross-site request refused", "method", r.Method, "path", r.URL.Path, "reason", err)
			http.Error(w, "forbidden: cross-site request", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// errCrossSiteReferer refuses a request that changes state from a browser
// that sends neither Sec-Fetch-Site nor Origin, whose Referer names another
// host.
var errCrossSiteReferer = errors.New("cross-origin request detected: Sec-Fetch-Site and Origin are missing, and Referer does not match Host")

// checkReferer is the Referer fallback of sameOrigin, for what
// CrossOriginProtection lets through: a request that may change state with
// neither Sec-Fetch-Site nor Origin.
func checkReferer(r *http.Request) error {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	ref := r.Header.Get("Referer")
	if ref == "" || r.Header.Get("Sec-Fetch-Site") != "" || r.Header.Get("Origin") != "" {
		return nil
	}
	if u, err := url.Parse(ref); err == nil && u.Host == r.Host {
		return nil
	}
	return errCrossSiteReferer
}

// hostOf is the host of a Host header, without its port.
func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// Start listens and serves in the background; it returns once the socket is
// bound, or with the bind error. Stop (or the end of ctx) shuts the server
// down, waiting up to 5s for requests in flight.
func (s *Server) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := s.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		stopped()
		return fmt.Errorf("admin: listen on %s: %w", s.cfg.Addr, err)
	}
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("admin: serve", "error", err)
		}
	}()
	go func() {
		defer stopped()
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-served
		s.mu.Lock()
		s.ln = nil
		s.mu.Unlock()
	}()
	started()
	s.cfg.Logger.Info("admin: listening", "addr", ln.Addr().String())
	return nil
}

// Addr is the bound address while started (useful with port 0), else the
// configured one.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return s.cfg.Addr
	}
	return s.ln.Addr().String()
}
