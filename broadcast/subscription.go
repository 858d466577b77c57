package broadcast

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"time"
)

// ErrClosed is returned by Next once the subscription is closed (by Close,
// by the end of the context given to Subscribe, or by the Broker's Close),
// and by a closed Broker's methods.
var ErrClosed = errors.New("broadcast: closed")

// Event is what a subscription yields: a message, or a gap.
//
// A gap (Gap true, no Data) says that messages of Channel may have been
// missed since the previous event: the listening session was reopened, the
// subscription's queue was full, or a large message's row was gone. The
// subscriber re-reads the state it keeps up to date; the missed messages
// never come back.
type Event struct {
	Channel     string          `json:"channel"`
	Data        json.RawMessage `json:"data,omitempty"`
	PublishedAt time.Time       `json:"published_at,omitzero"`
	Gap         bool            `json:"gap,omitempty"`
}

// Subscription is one subscriber's bounded queue of events on its
// channels. Next reads it; it is safe for one reader at a time.
type Subscription struct {
	b        *Broker
	channels []string
	size     int

	mu     sync.Mutex
	q      []Event
	n      int // messages (not gaps) in q
	closed bool
	wake   chan struct{}
	done   chan struct{}
	stop   func() bool
}

// Channels returns the channels subscribed to.
func (s *Subscription) Channels() []string { return slices.Clone(s.channels) }

// Next returns the next event, waiting for one until ctx ends or the
// subscription is closed (ErrClosed). Events queued before Close are
// dropped.
func (s *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return Event{}, ErrClosed
		}
		if len(s.q) > 0 {
			ev := s.q[0]
			s.q[0] = Event{}
			s.q = s.q[1:]
			if !ev.Gap {
				s.n--
			}
			s.mu.Unlock()
			return ev, nil
		}
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.done:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// Close ends the subscription; it is safe to call more than once.
func (s *Subscription) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.q = nil
	close(s.done)
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.b.remove(s)
}

// wants reports whether the subscription is on channel.
func (s *Subscription) wants(channel string) bool { return slices.Contains(s.channels, channel) }

// push queues ev without ever blocking the listener. A message that finds
// the queue full is dropped and becomes a gap of its channel, queued after
// the messages before it; consecutive gaps of one channel are one gap.
// It reports whether a message was dropped.
func (s *Subscription) push(ev Event) (dropped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	switch {
	case ev.Gap:
		s.addGap(ev.Channel)
	case s.n >= s.size:
		s.addGap(ev.Channel)
		dropped = true
	default:
		s.q = append(s.q, ev)
		s.n++
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return dropped
}

// addGap queues a gap of channel unless one is already queued after the
// last message (the gaps after the last message are at most one per
// channel, so the queue holds at most size messages plus one gap per
// channel).
func (s *Subscription) addGap(channel string) {
	for i := len(s.q) - 1; i >= 0 && s.q[i].Gap; i-- {
		if s.q[i].Channel == channel {
			return
		}
	}
	s.q = append(s.q, Event{Channel: channel, Gap: true})
}
