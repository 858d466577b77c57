package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// testToken is the token of every test bot: the tests check it never leaks.
const testToken = "123456:SECRET-TOKEN-zz"

// fakeReply scripts one answer of the fake Bot API.
type fakeReply struct {
	status int
	body   string
	header map[string]string
	hangup bool // close the connection without an answer: a transport error
}

// fakeCall is one getUpdates the fake received.
type fakeCall struct {
	Offset  int64
	Timeout int64
	Allowed []string
	At      time.Time
}

type fakeEntry struct {
	effID int64 // update_id, or the previous entry's for one without
	raw   string
}

type sentMessage struct {
	ChatID int64  `json:"chat_id"`
	Text   string `json:"text"`
}

// fakeAPI is a Bot API server for one token: getUpdates honours offset and
// timeout (it holds the request until an update at or after the offset
// exists, or the timeout passes), sendMessage records what it is sent.
// Updates are never forgotten: an offset past them is what hides them, as
// Telegram's acknowledgement does.
type fakeAPI struct {
	t   *testing.T
	srv *httptest.Server

	mu               sync.Mutex
	entries          []fakeEntry
	changed          chan struct{}
	script           []fakeReply // answers to the next getUpdates calls, in order
	sendScript       []fakeReply // answers to the next sendMessage calls
	ignoreOffsetOnce bool
	calls            []fakeCall
	inflight         int
	maxInflight      int
	sent             []sentMessage
}

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	f := &fakeAPI{t: t, changed: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /bot"+testToken+"/getUpdates", f.getUpdates)
	mux.HandleFunc("POST /bot"+testToken+"/sendMessage", f.sendMessage)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"ok":false,"error_code":404,"description":"Not Found"}`))
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the server's base URL (the Bot API URL of a client).
func (f *fakeAPI) URL() string { return f.srv.URL }

func (f *fakeAPI) client() *Client { return NewClient(f.URL(), testToken, nil) }

// push queues updates (raw JSON each).
func (f *fakeAPI) push(raws ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pushLocked(raws...)
}

func (f *fakeAPI) pushLocked(raws ...string) {
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
		f.entries = append(f.entries, fakeEntry{effID: eff, raw: raw})
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

// redeliver makes the next answer ignore the offset (all updates again),
// then queues raws.
func (f *fakeAPI) redeliver(raws ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ignoreOffsetOnce = true
	f.pushLocked(raws...)
}

// answer scripts the next getUpdates answers.
func (f *fakeAPI) answer(replies ...fakeReply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, replies...)
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeAPI) answerSend(replies ...fakeReply) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sendScript = append(f.sendScript, replies...)
}

func (f *fakeAPI) getCalls() []fakeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeCall(nil), f.calls...)
}

func (f *fakeAPI) getSent() []sentMessage {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sentMessage(nil), f.sent...)
}

func (f *fakeAPI) inflightNow() (now, most int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight, f.maxInflight
}

func (f *fakeAPI) getUpdates(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Offset         int64    `json:"offset"`
		Timeout        int64    `json:"timeout"`
		AllowedUpdates []string `json:"allowed_updates"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"ok":false,"error_code":400,"description":"Bad Request: can't parse JSON"}`))
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{Offset: req.Offset, Timeout: req.Timeout, Allowed: req.AllowedUpdates, At: time.Now()})
	f.inflight++
	f.maxInflight = max(f.maxInflight, f.inflight)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inflight--
		f.mu.Unlock()
	}()

	deadline := time.NewTimer(time.Duration(req.Timeout) * time.Second)
	defer deadline.Stop()
	for {
		f.mu.Lock()
		if len(f.script) > 0 {
			reply := f.script[0]
			f.script = f.script[1:]
			f.mu.Unlock()
			f.write(w, reply)
			return
		}
		offset := req.Offset
		if f.ignoreOffsetOnce {
			offset, f.ignoreOffsetOnce = 0, false
		}
		var out []string
		for _, e := range f.entries {
			if e.effID >= offset && len(out) < 100 {
				out = append(out, e.raw)
			}
		}
		changed := f.changed
		f.mu.Unlock()
		if len(out) > 0 || req.Timeout == 0 {
			f.write(w, fakeReply{status: http.StatusOK, body: `{"ok":true,"result":[` + strings.Join(out, ",") + `]}`})
			return
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return
		case <-deadline.C:
			f.write(w, fakeReply{status: http.StatusOK, body: `{"ok":true,"result":[]}`})
			return
		}
	}
}

func (f *fakeAPI) sendMessage(w http.ResponseWriter, r *http.Request) {
	var m sentMessage
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"ok":false,"error_code":400,"description":"Bad Request: can't parse JSON"}`))
		return
	}
	f.mu.Lock()
	var reply *fakeReply
	if len(f.sendScript) > 0 {
		reply = &f.sendScript[0]
		f.sendScript = f.sendScript[1:]
	} else {
		f.sent = append(f.sent, m)
	}
	f.mu.Unlock()
	if reply != nil {
		f.write(w, *reply)
		return
	}
	f.write(w, fakeReply{status: http.StatusOK, body: fmt.Sprintf(`{"ok":true,"result":{"message_id":1,"chat":{"id":%d},"text":%q}}`, m.ChatID, m.Text)})
}

func (f *fakeAPI) write(w http.ResponseWriter, reply fakeReply) {
	if reply.hangup {
		conn, _, err := w.(http.Hijacker).Hijack()
		require.NoError(f.t, err)
		_ = conn.Close()
		return
	}
	for k, v := range reply.header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(reply.status)
	_, _ = w.Write([]byte(reply.body))
}

// apiError is the body of a Bot API error answer.
func apiError(code int, description string, retryAfter int) fakeReply {
	body := map[string]any{"ok": false, "error_code": code, "description": description}
	if retryAfter > 0 {
		body["parameters"] = map[string]any{"retry_after": retryAfter}
	}
	b, _ := json.Marshal(body)
	return fakeReply{status: code, body: string(b)}
}

// fakeLeader holds a fixed term; failing makes its fence fail.
type fakeLeader struct {
	term    int64
	failing atomic.Bool
}

var errFakeNotLeader = errors.New("election: not the leader")

func (l *fakeLeader) Term() int64 { return l.term }

func (l *fakeLeader) Fence(context.Context, pgx.Tx) error {
	if l.failing.Load() {
		return errFakeNotLeader
	}
	return nil
}

// syncBuffer is a log buffer safe for the poller's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func (s *syncBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
