package periodic

import (
	"time"

	// Embed the IANA database so cron zones resolve on machines (and
	// containers) without /usr/share/zoneinfo.
	_ "time/tzdata"
)

// Trigger says when a schedule fires. Implementations are Every (ParseEvery)
// and *Cron (ParseCron); both are pure functions of the time they are given,
// safe for concurrent use.
type Trigger interface {
	// Next returns the first fire time strictly after t, or the zero time if
	// there is none.
	Next(t time.Time) time.Time
	// String is the trigger as written: "every 5m" or
	// "cron 0 6 * * * Europe/Madrid" (zone omitted when UTC).
	String() string
	// Zone is the IANA zone name the trigger is evaluated in ("UTC" for
	// Every).
	Zone() string
	// Interval is the nominal spacing of ticks, used as the default misfire
	// window: d for Every(d); for cron, the shortest gap between two
	// consecutive fire times (see Cron.Interval).
	Interval() time.Duration
}

// Compile-time checks that both triggers implement Trigger.
var (
	_ Trigger = every{}
	_ Trigger = (*Cron)(nil)
)
