package admin

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The console's sign-in session (see the package documentation).
const (
	// SessionCookie names the session cookie.
	SessionCookie = "ferry_admin_session"
	// SessionTTL is how long a session lasts after sign-in.
	SessionTTL = 12 * time.Hour
	// sessionInfo and csrfInfo label the keys derived from the token, so
	// that each serves one purpose.
	sessionInfo = "ferry admin session v1"
	csrfInfo    = "ferry admin csrf v1"
	// sessionVersion prefixes a session value, so that its shape can change.
	sessionVersion = "v1"
)

// deriveKey derives the key for info (sessionInfo, csrfInfo) from the
// admin token with HKDF-SHA256: every replica given the same token derives
// the same key, so a session or a form made by one is good on all of them,
// and a new token ends every session.
func deriveKey(token, info string) ([]byte, error) {
	key, err := hkdf.Key(sha256.New, []byte(token), nil, info, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("admin: derive a key from the token: %w", err)
	}
	return key, nil
}

// newSession returns a session value that expires at exp:
// "v1.<unix seconds>.<base64url HMAC-SHA256(key, "v1.<unix seconds>")>".
func newSession(key []byte, exp time.Time) string {
	payload := sessionVersion + "." + strconv.FormatInt(exp.Unix(), 10)
	return payload + "." + base64.RawURLEncoding.EncodeToString(sessionMAC(key, payload))
}

func sessionMAC(key []byte, payload string) []byte {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(payload))
	return mac.Sum(nil)
}

// validSession reports whether v is a session signed with key that has not
// expired at now.
func validSession(key []byte, v string, now time.Time) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 {
		return false
	}
	payload, sig := v[:i], v[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, sessionMAC(key, payload)) {
		return false
	}
	exp, ok := strings.CutPrefix(payload, sessionVersion+".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && now.Before(time.Unix(unix, 0))
}

// signedIn reports whether r carries a valid session cookie.
func (s *Server) signedIn(r *http.Request) bool {
	c, err := r.Cookie(SessionCookie)
	return err == nil && s.sessionKey != nil && validSession(s.sessionKey, c.Value, s.now())
}

// hasToken reports whether r carries the admin token, as a bearer token or
// as the password of HTTP basic auth (scripts, Prometheus), compared in
// constant time.
func (s *Server) hasToken(r *http.Request) bool {
	var got string
	if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		got = b
	} else if _, p, ok := r.BasicAuth(); ok {
		got = p
	} else {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
}

// wantsPage reports whether r is a browser opening a page (rather than a
// script or a page's own fetch), which is sent to the sign-in page instead
// of answered 401.
func wantsPage(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if mode := r.Header.Get("Sec-Fetch-Mode"); mode != "" {
		return mode == "navigate"
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// loginPath is the sign-in page.
const loginPath = "/admin/login"

// toLogin redirects a browser to the sign-in page, which sends it back to
// the page it asked for once signed in.
func toLogin(w http.ResponseWriter, r *http.Request) {
	http.Redirect(w, r, loginPath+"?"+url.Values{"next": {r.URL.RequestURI()}}.Encode(), http.StatusSeeOther)
}

// nextPath is where a sign-in sends the browser: next when it is a path
// on this server, else /admin/. A link cannot send it elsewhere.
func nextPath(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil ||
		!strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") ||
		strings.HasPrefix(u.Path, loginPath) {
		return "/admin/"
	}
	return next
}

// loginPage is the sign-in page's data.
type loginPage struct {
	Next   string
	Failed bool
}

// login serves GET and POST /admin/login. GET shows the form; POST checks
// the token once, in constant time, and on success sets the session
// cookie and redirects (303) to next. Without a token there is nothing to
// sign in to.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Token == "" {
		http.Redirect(w, r, "/admin/", http.StatusSeeOther)
		return
	}
	if r.Method != http.MethodPost {
		next := nextPath(r.URL.Query().Get("next"))
		if s.signedIn(r) {
			http.Redirect(w, r, next, http.StatusSeeOther)
			return
		}
		s.renderStatus(w, r, "login", http.StatusOK, loginPage{Next: next})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "bad request: unreadable form", http.StatusBadRequest)
		return
	}
	next := nextPath(r.PostForm.Get("next"))
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(s.cfg.Token)) != 1 {
		s.cfg.Logger.Warn("admin: sign-in refused: wrong token", "remote_addr", r.RemoteAddr)
		s.renderStatus(w, r, "login", http.StatusUnauthorized, loginPage{Next: next, Failed: true})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    newSession(s.sessionKey, s.now().Add(SessionTTL)),
		Path:     "/",
		MaxAge:   int(SessionTTL / time.Second),
		HttpOnly: true,
		Secure:   servedOverTLS(r),
		SameSite: http.SameSiteStrictMode,
	})
	s.cfg.Logger.Info("admin: signed in", "remote_addr", r.RemoteAddr, "expires_in", SessionTTL)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// logout is POST /admin/logout: it clears this browser's session cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{
		Name:     SessionCookie,
		Value:    "",
		Path:     "/",
		MaxAge:   -1,
		HttpOnly: true,
		Secure:   servedOverTLS(r),
		SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, loginPath, http.StatusSeeOther)
}

// servedOverTLS reports whether the browser reached the server over TLS:
// a TLS connection, or (behind a proxy that terminates TLS) a sign-in
// form posted from an https origin, as the browser says in Origin.
func servedOverTLS(r *http.Request) bool {
	return r.TLS != nil || strings.HasPrefix(r.Header.Get("Origin"), "https://")
}
