package admin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/locks"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

//go:embed templates
var templateFS embed.FS

// styleCSS is the one inline style block; the Content-Security-Policy
// allows it by its hash, and nothing else inline.
var (
	styleCSS = mustRead("templates/style.css")
	pageCSP  = "default-src 'self'; style-src 'sha256-" + cspHash(styleCSS) + "'; " +
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

const (
	// consoleTimeout bounds each Console call of a request.
	consoleTimeout = 10 * time.Second
	// maxFormBytes bounds a POST body.
	maxFormBytes = 64 << 10
	// maxResetIDs bounds the message ids of one reset.
	maxResetIDs = 1000
	// workersSince is how far back the workers page lists dead and stopped
	// workers, as enqueue workers does by default; workersWindow words it.
	workersSince  = time.Hour
	workersWindow = "hour"
)

func mustRead(name string) string {
	b, err := templateFS.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func cspHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// pageNames are ferry's pages: /admin/ is "index", the others /admin/NAME.
var pageNames = []string{"index", "leader", "workers", "schedules", "outbox", "telegram", "locks", "limits", "login"}

// reservedNames are the paths under /admin/ that are not pages.
var reservedNames = []string{"api", "events", "live.js", "logout"}

// pageName is what a capability's page may be named: a path segment.
var pageName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,39}$`)

// itemSuffix names the template of a page's item.
const itemSuffix = "/item"

// parsePages parses each page, ferry's and the capabilities' (extra),
// with the layout. An extra page's name must be free and a path segment,
// its title set, its data given and its template good.
func parsePages(extra []capability.Page) (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("admin: parse page %s: %w", name, err)
		}
		pages[name] = t
	}
	for _, p := range extra {
		switch {
		case !pageName.MatchString(p.Name):
			return nil, fmt.Errorf("admin: page %q: a name is lowercase letters, digits and dashes, starting with a letter", p.Name)
		case pages[p.Name] != nil || slices.Contains(reservedNames, p.Name):
			return nil, fmt.Errorf("admin: page %q: the name is taken", p.Name)
		case p.Title == "" || p.Data == nil:
			return nil, fmt.Errorf("admin: page %q: a page needs a title and its data", p.Name)
		}
		for name, text := range map[string]string{p.Name: p.Template, p.Name + itemSuffix: p.ItemTemplate} {
			if name != p.Name && p.Item == nil {
				continue
			}
			if name != p.Name && text == "" {
				return nil, fmt.Errorf("admin: page %q: an item needs its template", p.Name)
			}
			t, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
			if err == nil {
				_, err = t.New("content").Parse(text)
			}
			if err != nil {
				return nil, fmt.Errorf("admin: parse page %s: %w", name, err)
			}
			pages[name] = t
		}
	}
	return pages, nil
}

// routePages mounts ferry's pages, their JSON and the reset action.
func (s *Server) routePages(mux *http.ServeMux) {
	mux.Handle("GET /{$}", http.RedirectHandler("/admin/", http.StatusSeeOther))
	mux.Handle("GET /admin", http.RedirectHandler("/admin/", http.StatusMovedPermanently))
	mux.HandleFunc("GET /admin/{$}", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.summary)
		s.page(w, r, "index", v, err)
	})
	mux.HandleFunc("GET /admin/leader", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.leader)
		s.page(w, r, "leader", v, err)
	})
	mux.HandleFunc("GET /admin/workers", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.workers)
		s.page(w, r, "workers", workersPage{Window: workersWindow, Workers: v}, err)
	})
	mux.HandleFunc("GET /admin/schedules", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.schedules)
		s.page(w, r, "schedules", v, err)
	})
	mux.HandleFunc("GET /admin/outbox", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.cfg.Console.Outbox)
		s.page(w, r, "outbox", v, err)
	})
	mux.HandleFunc("GET /admin/telegram", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.telegram)
		s.page(w, r, "telegram", v, err)
	})
	mux.HandleFunc("GET /admin/locks", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.heldLocks)
		s.page(w, r, "locks", v, err)
	})
	mux.HandleFunc("GET /admin/limits", func(w http.ResponseWriter, r *http.Request) {
		v, err := call(r.Context(), s.limitsPage)
		s.page(w, r, "limits", v, err)
	})
	mux.HandleFunc("POST /admin/outbox/reset", s.resetOutbox)
	for _, p := range s.cfg.Pages {
		mux.HandleFunc("GET /admin/"+p.Name, func(w http.ResponseWriter, r *http.Request) {
			v, err := call(r.Context(), p.Data)
			s.page(w, r, p.Name, v, err)
		})
		if p.Item == nil {
			continue
		}
		item := func(r *http.Request) (any, error) {
			return call(r.Context(), func(ctx context.Context) (any, error) { return p.Item(ctx, r.PathValue("id")) })
		}
		mux.HandleFunc("GET /admin/"+p.Name+"/{id...}", func(w http.ResponseWriter, r *http.Request) {
			v, err := item(r)
			if errors.Is(err, capability.ErrNoItem) {
				s.renderPage(w, r, p.Name+itemSuffix, http.StatusNotFound, "Not found: "+r.PathValue("id")+".", nil)
				return
			}
			s.page(w, r, p.Name+itemSuffix, v, err)
		})
		mux.HandleFunc("GET /admin/api/"+p.Name+"/{id...}", func(w http.ResponseWriter, r *http.Request) {
			v, err := item(r)
			switch {
			case errors.Is(err, capability.ErrNoItem):
				writeJSON(w, http.StatusNotFound, map[string]string{"error": "not found"})
			case err != nil:
				s.cfg.Logger.Warn("admin: api", "name", p.Name, "error", err)
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error; see the worker's log"})
			default:
				writeJSON(w, http.StatusOK, v)
			}
		})
	}

	api := map[string]func(ctx context.Context) (any, error){
		"summary":   func(ctx context.Context) (any, error) { return s.summary(ctx) },
		"leader":    func(ctx context.Context) (any, error) { return s.leader(ctx) },
		"workers":   func(ctx context.Context) (any, error) { return s.workers(ctx) },
		"schedules": func(ctx context.Context) (any, error) { return s.schedules(ctx) },
		"outbox":    func(ctx context.Context) (any, error) { return s.cfg.Console.Outbox(ctx) },
		"locks":     func(ctx context.Context) (any, error) { return s.heldLocks(ctx) },
		"limits":    func(ctx context.Context) (any, error) { return s.limits(ctx) },
		"fairness":  func(ctx context.Context) (any, error) { return s.fairness(ctx) },
		"telegram":  func(ctx context.Context) (any, error) { return s.telegram(ctx) },
	}
	for _, p := range s.cfg.Pages {
		api[p.Name] = p.Data
	}
	for name, fn := range api {
		mux.HandleFunc("GET /admin/api/"+name, func(w http.ResponseWriter, r *http.Request) {
			v, err := call(r.Context(), fn)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Cache-Control", "no-store")
			if err != nil {
				s.cfg.Logger.Warn("admin: api", "name", name, "error", err)
				w.WriteHeader(http.StatusInternalServerError)
				_ = json.NewEncoder(w).Encode(map[string]string{"error": "internal error; see the worker's log"})
				return
			}
			_ = json.NewEncoder(w).Encode(v)
		})
	}
}

// call runs fn under consoleTimeout.
func call[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, consoleTimeout)
	defer cancel()
	return fn(ctx)
}

// summary is the Console's summary, with [] rather than null when no
// schedule is late.
func (s *Server) summary(ctx context.Context) (Summary, error) {
	v, err := s.cfg.Console.Summary(ctx)
	if v.LateSchedules == nil {
		v.LateSchedules = []LateSchedule{}
	}
	return v, err
}

// leader is the Console's leader view with each term's end.
func (s *Server) leader(ctx context.Context) (LeaderPage, error) {
	v, err := s.cfg.Console.Leader(ctx)
	return leaderPage(v), err
}

// schedules, telegram and workers answer [] rather than null when there is
// none.
func (s *Server) schedules(ctx context.Context) ([]periodic.Row, error) {
	rows, err := s.cfg.Console.Schedules(ctx)
	if rows == nil && err == nil {
		rows = []periodic.Row{}
	}
	return rows, err
}

// heldLocks is the Console's held locks, [] rather than null when none is.
func (s *Server) heldLocks(ctx context.Context) ([]locks.Holder, error) {
	hs, err := s.cfg.Console.Locks(ctx)
	if hs == nil {
		hs = []locks.Holder{}
	}
	return hs, err
}

// limits is the Console's limits, [] rather than null when none is.
func (s *Server) limits(ctx context.Context) ([]limit.Status, error) {
	ls, err := s.cfg.Console.Limits(ctx)
	if ls == nil {
		ls = []limit.Status{}
	}
	return ls, err
}

// fairness is the Console's fair queues, [] rather than null when none
// is.
func (s *Server) fairness(ctx context.Context) ([]limit.FairStatus, error) {
	fs, err := s.cfg.Console.Fairness(ctx)
	if fs == nil {
		fs = []limit.FairStatus{}
	}
	return fs, err
}

// shownFairKeys is how many keys of a fair queue the limits page lists
// (the busiest); /admin/api/fairness lists them all.
const shownFairKeys = 20

// limitsPage is the limits page's data: the limits, and the fair queues
// below them (their JSON is /admin/api/limits and /admin/api/fairness).
type limitsPage struct {
	Limits []limit.Status
	Fair   []fairView
}

// fairView is a fair queue as the limits page shows it: its busiest keys,
// how many more it has, and the jobs started from all of them.
type fairView struct {
	limit.FairStatus
	Shown   []limit.FairKeyStatus
	More    int
	Started int64
}

func (s *Server) limitsPage(ctx context.Context) (limitsPage, error) {
	ls, err := s.limits(ctx)
	if err != nil {
		return limitsPage{}, err
	}
	fs, err := s.fairness(ctx)
	if err != nil {
		return limitsPage{}, err
	}
	p := limitsPage{Limits: ls}
	for _, f := range fs {
		v := fairView{FairStatus: f, Shown: f.Keys[:min(len(f.Keys), shownFairKeys)], More: max(len(f.Keys)-shownFairKeys, 0)}
		for _, k := range f.Keys {
			v.Started += k.Started
		}
		p.Fair = append(p.Fair, v)
	}
	return p, nil
}

func (s *Server) telegram(ctx context.Context) ([]telegram.BotStatus, error) {
	bots, err := s.cfg.Console.Telegram(ctx)
	if bots == nil && err == nil {
		bots = []telegram.BotStatus{}
	}
	return bots, err
}

func (s *Server) workers(ctx context.Context) ([]liveness.WorkerInfo, error) {
	ws, err := s.cfg.Console.Workers(ctx, workersSince)
	if ws == nil && err == nil {
		ws = []liveness.WorkerInfo{}
	}
	return ws, err
}

// workersPage is the workers page's data: the JSON is the list alone.
type workersPage struct {
	Window  string
	Workers []liveness.WorkerInfo
}

// pageData is what the layout and every page get.
type pageData struct {
	Page    string
	CSS     template.CSS
	CSRF    string
	Now     time.Time
	RiverUI bool
	// Replica names the replica that answered (Config.Replica).
	Replica string
	// SignOut shows the sign-out button: a token is set.
	SignOut bool
	// Flash is a one-line notice (after a reset), FlashError says it
	// reports a failure.
	Flash      string
	FlashError bool
	// Error replaces the page's content when its data could not be read.
	Error string
	Data  any
	// Extra are the capabilities' pages, in the navigation.
	Extra []capability.Page
}

// page renders a page whose data came from the Console: on err it logs the
// error and renders a generic message instead, with status 500.
func (s *Server) page(w http.ResponseWriter, r *http.Request, name string, data any, err error) {
	if err != nil {
		s.cfg.Logger.Warn("admin: page", "page", name, "error", err)
		s.render(w, r, name, "Could not read the "+name+" data. The error is in the worker's log.", nil)
		return
	}
	s.render(w, r, name, "", data)
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name, errMsg string, data any) {
	status := http.StatusOK
	if errMsg != "" {
		status = http.StatusInternalServerError
	}
	s.renderPage(w, r, name, status, errMsg, data)
}

// renderStatus renders a page with its data and status.
func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, name string, status int, data any) {
	s.renderPage(w, r, name, status, "", data)
}

func (s *Server) renderPage(w http.ResponseWriter, r *http.Request, name string, status int, errMsg string, data any) {
	d := pageData{
		Page:    strings.TrimSuffix(name, itemSuffix),
		CSS:     template.CSS(styleCSS), //nolint:gosec // a constant from the binary
		CSRF:    s.csrf,
		Now:     s.now().UTC(),
		RiverUI: s.cfg.RiverUI != nil,
		Replica: s.cfg.Replica,
		SignOut: s.cfg.Token != "",
		Error:   errMsg,
		Data:    data,
		Extra:   s.cfg.Pages,
	}
	if name == "outbox" {
		d.Flash, d.FlashError = resetFlash(r.URL.Query())
	}
	var buf bytes.Buffer
	if err := s.pages[name].Execute(&buf, d); err != nil {
		s.cfg.Logger.Error("admin: render page", "page", name, "error", err)
		http.Error(w, "internal error; see the worker's log", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// resetOutbox is POST /admin/outbox/reset: message_id (one or more) and the
// CSRF token. It redirects (303) to /admin/outbox with the outcome in the
// query string, as counts only: the page words the notice, so a crafted link
// cannot make it say anything else.
func (s *Server) resetOutbox(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad request: unreadable form", http.StatusBadRequest)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
		s.cfg.Logger.Warn("admin: request without a valid CSRF token refused", "path", r.URL.Path)
		http.Error(w, "forbidden: missing or stale CSRF token; reload the page and try again", http.StatusForbidden)
		return
	}
	ids, err := messageIDs(r.PostForm["message_id"])
	if err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), consoleTimeout)
	defer cancel()
	q := url.Values{}
	deliveries, messages, err := s.cfg.Console.ResetOutbox(ctx, ids)
	if err != nil {
		s.cfg.Logger.Error("admin: outbox reset", "message_ids", ids, "error", err)
		q.Set("reset_error", "1")
	} else {
		s.cfg.Logger.Info("admin: outbox reset", "message_ids", ids, "deliveries", deliveries, "messages", messages)
		q.Set("reset_deliveries", strconv.Itoa(deliveries))
		q.Set("reset_messages", strconv.Itoa(messages))
	}
	http.Redirect(w, r, "/admin/outbox?"+q.Encode(), http.StatusSeeOther)
}

// messageIDs parses the message_id values: positive integers, at least
// one, at most maxResetIDs, duplicates dropped.
func messageIDs(vals []string) ([]int64, error) {
	if len(vals) == 0 {
		return nil, errors.New("no message_id")
	}
	if len(vals) > maxResetIDs {
		return nil, fmt.Errorf("more than %d message_id values", maxResetIDs)
	}
	ids := make([]int64, 0, len(vals))
	for _, v := range vals {
		id, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || id <= 0 {
			return nil, errors.New("message_id must be a positive integer")
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// resetFlash words the outcome of a reset from the redirect's query.
func resetFlash(q url.Values) (msg string, isErr bool) {
	if q.Has("reset_error") {
		return "The reset failed and changed nothing. The error is in the worker's log.", true
	}
	if !q.Has("reset_deliveries") {
		return "", false
	}
	d, err1 := strconv.Atoi(q.Get("reset_deliveries"))
	m, err2 := strconv.Atoi(q.Get("reset_messages"))
	if err1 != nil || err2 != nil || d < 0 || m < 0 {
		return "", false
	}
	if d == 0 {
		return "Nothing to reset: those deliveries are no longer stuck.", false
	}
	return fmt.Sprintf("Reset %s of %s: queued for delivery again.", plural(d, "delivery", "deliveries"), plural(m, "message", "messages")), false
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// funcs are the templates' helpers.
var funcs = template.FuncMap{
	// at pairs the page's now with a time for the "when" template.
	"at": func(now time.Time, t any) map[string]any { return map[string]any{"Now": now, "T": t} },
	"has": func(v any) bool {
		_, ok := timeOf(v)
		return ok
	},
	"utc": func(v any) string {
		t, ok := timeOf(v)
		if !ok {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"rel": func(now time.Time, v any) string {
		t, ok := timeOf(v)
		if !ok {
			return ""
		}
		return relative(t.Sub(now))
	},
	"str": func(v any) string {
		switch p := v.(type) {
		case *string:
			if p != nil {
				return *p
			}
		case *int64:
			if p != nil {
				return strconv.FormatInt(*p, 10)
			}
		case *int:
			if p != nil {
				return strconv.Itoa(*p)
			}
		case string:
			return p
		case int64:
			return strconv.FormatInt(p, 10)
		case int:
			return strconv.Itoa(p)
		}
		return ""
	},
}

func timeOf(v any) (time.Time, bool) {
	switch t := v.(type) {
	case time.Time:
		return t, !t.IsZero()
	case *time.Time:
		if t != nil && !t.IsZero() {
			return *t, true
		}
	}
	return time.Time{}, false
}

// relative words d (a time minus now) as "in 4m 10s" or "2h 5m ago".
func relative(d time.Duration) string {
	future := d > 0
	if !future {
		d = -d
	}
	d = d.Round(time.Second)
	var s string
	switch {
	case d < time.Second:
		return "now"
	case d < time.Minute:
		s = fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		s = fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		s = fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		s = fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

// writeJSON writes v as JSON with status, not to be cached.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
