package fleet

import (
	"bytes"
	"sync"
)

// notifier wakes waiters: notify closes the current channel and makes a new
// one. A waiter takes the channel before it looks at the output, so anything
// written after it looked closes the channel it waits on.
type notifier struct {
	mu sync.Mutex
	ch chan struct{}
}

func newNotifier() *notifier { return &notifier{ch: make(chan struct{})} }

// changed returns the channel that the next notify closes.
func (n *notifier) changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ch
}

func (n *notifier) notify() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.ch)
	n.ch = make(chan struct{})
}

// stream is one captured output of a process. Every write, and the end of
// the stream, notifies: the process's own notifier, which a fleet's
// processes share.
type stream struct {
	n   *notifier
	mu  sync.Mutex
	buf []byte
	eof bool
}

// Write implements io.Writer; os/exec copies the child's pipe into it.
func (s *stream) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.buf = append(s.buf, p...)
	s.mu.Unlock()
	s.n.notify()
	return len(p), nil
}

// end marks the stream complete: the process has exited and its pipe is
// drained.
func (s *stream) end() {
	s.mu.Lock()
	s.eof = true
	s.mu.Unlock()
	s.n.notify()
}

func (s *stream) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.buf)
}

// len is how many bytes have been written so far.
func (s *stream) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}

// scan looks for a line that matches in the complete lines from *off on (and
// the unterminated last line once the stream has ended), moving *off past the
// lines it read. It also says whether the stream has ended.
func (s *stream) scan(off *int, match func(string) bool) (line string, found, eof bool) {
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
			return l, true, s.eof
		}
	}
	return "", false, s.eof
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
