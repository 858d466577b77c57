// Package telegramtest is a fake Telegram Bot API for tests: an HTTP server
// on 127.0.0.1 for one bot token, serving getUpdates and sendMessage the way
// Telegram does, with answers a test can script. The telegram package's
// tests talk to it through a Client; the end-to-end tests point real worker
// processes at it (FERRY_TELEGRAM_API_URL).
//
// # getUpdates
//
// getUpdates honours offset (updates with update_id >= offset, in order, at
// most limit, default and cap 100) and the long-poll timeout: the request is
// held until such an update exists, the timeout passes, or the client goes
// away (the call is then recorded as Abandoned). Updates are never
// forgotten: only a greater offset hides them, as Telegram's acknowledgement
// does (Redeliver makes the next answer ignore the offset once). Scripted
// answers (Answer) take precedence, one per call. Each call is recorded
// (Calls).
//
// It counts the getUpdates calls in flight. A call is in flight from the
// moment its handler starts until the handler returns: when it answers (the
// answer is flushed after the handler returns, so the count drops before the
// client can read it and send its next call), or when r.Context() is done,
// which net/http does when the client closes the connection (it reads the
// connection in the background once the body is read to its end). So a
// killed process's held call ends when the kernel closes its socket, and a
// demoted one's when its client cancels it. A second call while one is in
// flight is recorded as an overlap (Stats, RequireOneConsumer).
//
// # sendMessage
//
// sendMessage records chat_id and text (Sent, NextSent) and answers with the
// message; scripted answers (AnswerSend) take precedence and are not
// recorded as sent.
//
// Any other path, method or token is answered 404 as Telegram does.
package telegramtest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Reply scripts one answer of the fake.
type Reply struct {
	Status int
	Body   string
	Header map[string]string // set on the answer, after Content-Type
	Hangup bool              // close the connection without an answer: a transport error
}

// APIError is a Bot API error answer; retryAfter > 0 adds
// parameters.retry_after.
func APIError(code int, description string, retryAfter int) Reply {
	body := map[string]any{"ok": false, "error_code": code, "description": description}
	if retryAfter > 0 {
		body["parameters"] = map[string]any{"retry_after": retryAfter}
	}
	b, _ := json.Marshal(body)
	return Reply{Status: code, Body: string(b)}
}

// Call is one getUpdates the fake received.
type Call struct {
	Offset  int64
	Timeout int64
	Allowed []string
	At      time.Time
	// Abandoned is set when the client went away before an answer (a long
	// poll its client cancelled, or a killed process's), as opposed to one
	// answered, if only at its timeout.
	Abandoned bool
}

// Message is one sendMessage the fake received.
type Message struct {
	ChatID int64  `json:"chat_id"`
	Text   string `json:"text"`
}

type entry struct {
	effID int64 // update_id, or the previous entry's for an update without one
	raw   string
}

// BotAPI is the fake server. Its methods are safe for concurrent use.
type BotAPI struct {
	tb    testing.TB
	token string
	srv   *httptest.Server
	quit  chan struct{}

	mu               sync.Mutex
	entries          []entry
	changed          chan struct{}
	script           []Reply // answers to the next getUpdates calls, in order
	sendScript       []Reply // answers to the next sendMessage calls
	ignoreOffsetOnce bool
	calls            []Call
	requests         int // every request, any path
	polls            int // getUpdates calls of the token
	inflight         map[*http.Request]string
	maxInflight      int
	overlaps         []string
	sent             []Message
	sentC            chan Message
}

// NewBotAPI starts a fake Bot API for token, closed when the test ends.
// Create it before the processes or pollers that use it, so that its cleanup
// runs after theirs; held calls are ended then.
func NewBotAPI(tb testing.TB, token string) *BotAPI {
	tb.Helper()
	f := &BotAPI{
		tb:       tb,
		token:    token,
		quit:     make(chan struct{}),
		changed:  make(chan struct{}),
		inflight: map[*http.Request]string{},
		sentC:    make(chan Message, 16),
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve)) // 127.0.0.1:0
	tb.Cleanup(func() {
		close(f.quit)
		f.srv.Close()
	})
	return f
}

// URL is the server's base URL (the Bot API URL of a client).
func (f *BotAPI) URL() string { return f.srv.URL }

func (f *BotAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests++
	f.mu.Unlock()
	method, ok := strings.CutPrefix(r.URL.Path, "/bot"+f.token+"/")
	switch {
	case ok && r.Method == http.MethodPost && method == "getUpdates":
		f.getUpdates(w, r)
	case ok && r.Method == http.MethodPost && method == "sendMessage":
		f.sendMessage(w, r)
	default:
		f.write(w, Reply{Status: http.StatusNotFound, Body: `{"ok":false,"error_code":404,"description":"Not Found"}`})
	}
}

// Push appends updates (raw JSON each) and wakes the held calls.
func (f *BotAPI) Push(raws ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pushLocked(raws...)
}

// Redeliver makes the next answer ignore the offset (all updates again), then
// appends raws.
func (f *BotAPI) Redeliver(raws ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ignoreOffsetOnce = true
	f.pushLocked(raws...)
}

func (f *BotAPI) pushLocked(raws ...string) {
	for _, raw := range raws {
		var u struct {
			UpdateID *int64 `json:"update_id"`
		}
		eff := int64(0)
		if n := len(f.entries); n > 0 {
			eff = f.entries[n-1].effID
		}
		if json.Unmarshal([]byte(raw), &u) == nil && u.UpdateID != nil {
			eff = *u.UpdateID
		}
		f.entries = append(f.entries, entry{effID: eff, raw: raw})
	}
	f.wakeLocked()
}

// Answer scripts the next getUpdates answers, in order.
func (f *BotAPI) Answer(replies ...Reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, replies...)
	f.wakeLocked()
}

// AnswerSend scripts the next sendMessage answers, in order.
func (f *BotAPI) AnswerSend(replies ...Reply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendScript = append(f.sendScript, replies...)
}

func (f *BotAPI) wakeLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Calls returns the getUpdates calls received so far.
func (f *BotAPI) Calls() []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Sent returns the messages sent so far.
func (f *BotAPI) Sent() []Message {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.sent)
}

// NextSent waits up to timeout for the next sendMessage (of the last 16 not
// yet taken), failing tb without one.
func (f *BotAPI) NextSent(tb testing.TB, timeout time.Duration) Message {
	tb.Helper()
	select {
	case m := <-f.sentC:
		return m
	case <-time.After(timeout):
		tb.Fatalf("telegramtest: no sendMessage in %s", timeout)
		return Message{}
	}
}

// Inflight returns the getUpdates calls in flight now, and the most seen at
// once.
func (f *BotAPI) Inflight() (now, most int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.inflight), f.maxInflight
}

// Stats returns the counts: every request, getUpdates calls, the most
// getUpdates in flight at once, and the overlaps seen.
func (f *BotAPI) Stats() (requests, polls, maxInflight int, overlaps []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.requests, f.polls, f.maxInflight, slices.Clone(f.overlaps)
}

// RequireOneConsumer fails tb if two getUpdates calls were ever in flight at
// once, or none was made.
func (f *BotAPI) RequireOneConsumer(tb testing.TB) {
	tb.Helper()
	_, polls, most, overlaps := f.Stats()
	require.Empty(tb, overlaps, "concurrent getUpdates calls")
	require.Positive(tb, polls)
	require.Equal(tb, 1, most, "getUpdates calls in flight at once, at most")
}

func (f *BotAPI) getUpdates(w http.ResponseWriter, r *http.Request) {
	// Read to the end: only then does net/http watch the connection and
	// cancel r.Context() when the client closes it.
	body, err := io.ReadAll(r.Body)
	var req struct {
		Offset         int64    `json:"offset"`
		Limit          int      `json:"limit"`
		Timeout        int64    `json:"timeout"`
		AllowedUpdates []string `json:"allowed_updates"`
	}
	if err != nil || json.Unmarshal(body, &req) != nil {
		f.write(w, Reply{Status: http.StatusBadRequest, Body: `{"ok":false,"error_code":400,"description":"Bad Request: can't parse JSON"}`})
		return
	}
	limit := req.Limit
	if limit <= 0 || limit > 100 {
		limit = 100
	}

	f.mu.Lock()
	f.calls = append(f.calls, Call{Offset: req.Offset, Timeout: req.Timeout, Allowed: req.AllowedUpdates, At: time.Now()})
	callIdx := len(f.calls) - 1
	f.polls++
	if len(f.inflight) > 0 {
		var others []string
		for _, o := range f.inflight {
			others = append(others, o)
		}
		f.overlaps = append(f.overlaps, fmt.Sprintf("%s getUpdates(offset %d) from %s while in flight: %s",
			time.Now().Format("15:04:05.000"), req.Offset, r.RemoteAddr, strings.Join(others, "; ")))
	}
	f.inflight[r] = fmt.Sprintf("getUpdates(offset %d) from %s since %s", req.Offset, r.RemoteAddr, time.Now().Format("15:04:05.000"))
	f.maxInflight = max(f.maxInflight, len(f.inflight))
	f.mu.Unlock()
	var once sync.Once
	ended := func() {
		once.Do(func() {
			f.mu.Lock()
			delete(f.inflight, r)
			f.mu.Unlock()
		})
	}
	defer ended()

	deadline := time.NewTimer(time.Duration(req.Timeout) * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		if len(f.script) > 0 {
			reply := f.script[0]
			f.script = f.script[1:]
			f.mu.Unlock()
			if reply.Hangup {
				// The client sees the connection close at once: end the
				// call first, or its retry could look like an overlap.
				ended()
			}
			f.write(w, reply)
			return
		}
		offset := req.Offset
		if f.ignoreOffsetOnce {
			offset, f.ignoreOffsetOnce = 0, false
		}
		var out []string
		for _, e := range f.entries {
			if e.effID >= offset && len(out) < limit {
				out = append(out, e.raw)
			}
		}
		changed := f.changed
		f.mu.Unlock()
		if len(out) > 0 || req.Timeout == 0 {
			f.write(w, Reply{Status: http.StatusOK, Body: `{"ok":true,"result":[` + strings.Join(out, ",") + `]}`})
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			select {
			case <-f.quit: // the fake is closing, not the client
			default:
				f.mu.Lock()
				f.calls[callIdx].Abandoned = true
				f.mu.Unlock()
			}
			return
		case <-f.quit:
			return
		case <-deadline.C:
			f.write(w, Reply{Status: http.StatusOK, Body: `{"ok":true,"result":[]}`})
			return
		}
	}
}

func (f *BotAPI) sendMessage(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var m Message
	if err != nil || json.Unmarshal(body, &m) != nil {
		f.write(w, Reply{Status: http.StatusBadRequest, Body: `{"ok":false,"error_code":400,"description":"Bad Request: can't parse JSON"}`})
		return
	}
	f.mu.Lock()
	if len(f.sendScript) > 0 {
		reply := f.sendScript[0]
		f.sendScript = f.sendScript[1:]
		f.mu.Unlock()
		f.write(w, reply)
		return
	}
	f.sent = append(f.sent, m)
	f.mu.Unlock()
	select {
	case f.sentC <- m:
	default:
	}
	text, _ := json.Marshal(m.Text)
	f.write(w, Reply{Status: http.StatusOK, Body: fmt.Sprintf(`{"ok":true,"result":{"message_id":1,"date":1,"chat":{"id":%d,"type":"private"},"text":%s}}`, m.ChatID, text)})
}

// write sends reply: a JSON body as application/json, anything else as
// text/html (a proxy's error page), then reply's headers; or, for a hangup,
// closes the connection.
func (f *BotAPI) write(w http.ResponseWriter, reply Reply) {
	if reply.Hangup {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			f.tb.Errorf("telegramtest: hang up: %v", err)
			return
		}
		_ = conn.Close()
		return
	}
	if strings.HasPrefix(reply.Body, "{") {
		w.Header().Set("Content-Type", "application/json")
	} else {
		w.Header().Set("Content-Type", "text/html")
	}
	for k, v := range reply.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(reply.Status)
	_, _ = w.Write([]byte(reply.Body))
}
