package broadcast

import "time"

// Defaults of Config's replay window.
const (
	// DefaultReplayWindow is how old a signed message may be when it is
	// received: two minutes covers a PublishTx in a transaction of a minute
	// or more, a listener catching up, and clocks an NTP daemon keeps
	// within milliseconds, while the signatures a receiver remembers stay
	// those of two minutes' messages.
	DefaultReplayWindow = 2 * time.Minute
	// DefaultMaxClockSkew is how far ahead of the receiver's clock a
	// signed message may be dated.
	DefaultMaxClockSkew = 30 * time.Second
)

// replayGuard refuses signed messages outside the window and those it has
// accepted already. It remembers the signature (the MAC's bytes: a
// message's channel, time and data, which every publisher makes unique by
// its time) of each message it accepts until the message is older than the
// window, past which a copy is refused as stale: its memory holds at most
// the messages of a window and a skew. It runs on the listening goroutine
// only.
type replayGuard struct {
	window, skew int64            // microseconds
	seen         map[string]int64 // MAC → forgotten after (unix microseconds)
	nextSweep    int64
}

func newReplayGuard(window, skew time.Duration) *replayGuard {
	return &replayGuard{window: window.Microseconds(), skew: skew.Microseconds(), seen: map[string]int64{}}
}

// admit reports why the message published at t (unix microseconds) with
// MAC mac must be dropped at now (DropStale, DropReplayed), or "" when it
// is accepted, and then remembers it.
func (g *replayGuard) admit(mac []byte, t, now int64) string {
	if t+g.window < now || t > now+g.skew {
		return DropStale
	}
	if now >= g.nextSweep {
		for k, until := range g.seen {
			if until < now {
				delete(g.seen, k)
			}
		}
		g.nextSweep = now + g.window/4
	}
	if _, ok := g.seen[string(mac)]; ok {
		return DropReplayed
	}
	g.seen[string(mac)] = t + g.window
	return ""
}
