package proctest

import (
	"bytes"
	"sync"
)

// stream is one captured output of a process. Every write, and the end of the
// stream, closes the current changed channel and makes a new one, so a waiter
// that took the channel under the lock is woken by anything that happens
// after it looked.
type stream struct {
	mu      sync.Mutex
	buf     []byte
	eof     bool
	changed chan struct{}
}

func newStream() *stream { return &stream{changed: make(chan struct{})} }

// Write implements io.Writer; os/exec copies the child's pipe into it.
func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.buf = append(s.buf, p...)
	s.notify()
	return len(p), nil
}

// end marks the stream complete: the process has exited and its pipe is
// drained.
func (s *stream) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eof = true
	s.notify()
}

func (s *stream) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *stream) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.buf)
}

// scan looks for a line that matches in the complete lines from *off on (and
// the unterminated last line once the stream has ended), moving *off past the
// lines it read. When none matches it returns the channel that the next
// change closes, and whether the stream has ended.
func (s *stream) scan(off *int, match func(string) bool) (line string, found bool, changed <-chan struct{}, eof bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for *off < len(s.buf) {
		rest := s.buf[*off:]
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			if !s.eof {
				break
			}
			i = len(rest)
		}
		l := string(bytes.TrimSuffix(rest[:i], []byte("\r")))
		*off += min(i+1, len(rest))
		if match(l) {
			return l, true, nil, s.eof
		}
	}
	return "", false, s.changed, s.eof
}

// tail returns at most the last n bytes, starting at a line boundary when
// there is one.
func (s *stream) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.buf) <= n {
		return string(s.buf)
	}
	t := s.buf[len(s.buf)-n:]
	if i := bytes.IndexByte(t, '\n'); i >= 0 && i < len(t)-1 {
		t = t[i+1:]
	}
	return "…" + string(t)
}
