package periodic

import (
	"fmt"
	"math/big"
	"strings"
	"time"
)

// Bounds of Every and ParseEvery.
const (
	// minEvery is the smallest interval Every accepts; below it a schedule
	// is a busy loop, a programming error.
	minEvery = 100 * time.Millisecond
	// minParseEvery and maxParseEvery bound the intervals ParseEvery
	// accepts from user input.
	minParseEvery = time.Second
	maxParseEvery = 366 * 24 * time.Hour
)

// every is the Trigger of Every: the multiples of d since the Unix epoch.
type every struct{ d time.Duration }

// Every fires at every multiple of d since the Unix epoch, in UTC:
// Every(5*time.Minute) fires at :00, :05, …, Every(time.Hour) on the hour.
// A d that does not divide an hour or a day keeps counting from the epoch
// rather than restarting each hour (Every(7*time.Minute) fires at 00:58
// and 01:05 on 2027-01-01). Every replica computes the same ticks, the next
// tick never drifts with the time a run took, and a late caller gets the
// next multiple, never a burst.
//
// Every panics if d is below 100ms (a programming error); use ParseEvery for
// user input.
func Every(d time.Duration) Trigger {
	if d < minEvery {
		panic(fmt.Sprintf("periodic: Every(%v): the interval must be at least %v", d, minEvery))
	}
	return every{d: d}
}

// ParseEvery parses a Go duration ("15m", "1h30m", "10s") into Every. The
// interval must be between 1s and 366 days; errors name the value.
func ParseEvery(s string) (Trigger, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("every %q: not a duration (want e.g. 10s, 15m, 1h30m)", s)
	}
	switch {
	case d < minParseEvery:
		return nil, fmt.Errorf("every %q: the interval must be at least %v", s, minParseEvery)
	case d > maxParseEvery:
		return nil, fmt.Errorf("every %q: the interval must be at most 366 days (%v)", s, formatDuration(maxParseEvery))
	}
	return every{d: d}, nil
}

// Next returns the first multiple of the interval since the Unix epoch that
// is strictly after t, in UTC. It returns the zero time only when that
// instant cannot be represented.
func (e every) Next(t time.Time) time.Time {
	d := int64(e.d)
	// Fast path: t.UnixNano is exact between the years 1678 and 2262, and
	// adding d cannot overflow while d is under about three years.
	if sec := t.Unix(); sec > -9e9 && sec < 9e9 && d < 1e17 {
		n := t.UnixNano()
		r := n % d
		if r < 0 {
			r += d
		}
		return time.Unix(0, n-r+d).UTC()
	}
	// Elsewhere, the same arithmetic in arbitrary precision.
	billion := big.NewInt(1e9)
	n := new(big.Int).Mul(big.NewInt(t.Unix()), billion)
	n.Add(n, big.NewInt(int64(t.Nanosecond())))
	bd := big.NewInt(d)
	n.Div(n, bd) // Euclidean, so floor for a positive divisor
	n.Add(n, big.NewInt(1))
	n.Mul(n, bd)
	sec, nsec := new(big.Int).DivMod(n, billion, new(big.Int))
	if !sec.IsInt64() {
		return time.Time{}
	}
	return time.Unix(sec.Int64(), nsec.Int64()).UTC()
}

// String is "every " and the interval without zero units: "every 5m",
// "every 1h30m", "every 24h", "every 1.5s". ParseEvery reads it back.
func (e every) String() string { return "every " + formatDuration(e.d) }

// Zone is "UTC": Every counts from the epoch in real time.
func (every) Zone() string { return "UTC" }

// Interval is the interval d.
func (e every) Interval() time.Duration { return e.d }

// formatDuration is d.String() without trailing zero units: 5m0s is "5m",
// 1h0m0s is "1h", 1h30m0s is "1h30m"; 1h0m5s stays as it is.
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
