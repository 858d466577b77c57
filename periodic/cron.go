package periodic

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Why a cron parser of our own rather than github.com/robfig/cron/v3, the
// usual choice: measured here, for "30 2 * * *" in Europe/Madrid robfig
// skips 02:30 entirely on the spring-forward day (2027-03-28) and runs it
// twice on the fall-back day (2027-10-31); it rejects 7 as Sunday; and its
// errors do not name the field. Schedules rely on the DST contract in
// DESIGN.md (cronie's), so the parser and the next-time logic live here,
// with no new dependency.
//
// How Next works. Fire times are computed on the zone's wall clock, a day at
// a time. For each day whose month, day of month and weekday match, the UTC
// offsets in force around that day are listed (time.Time.ZoneBounds). On an
// ordinary day there is one offset, and the first matching hour:minute after
// t is found with bit arithmetic. On a day near a transition every matching
// wall time W is resolved against each offset o: W-o is a real occurrence if
// o is in force at W-o. Two occurrences (fall back): a fixed-time entry
// takes the first, others take both. None (spring forward): a fixed-time
// entry fires at W minus the offset in force before the transition (an hour
// later for a one-hour shift), others do not fire.

// ZoneError is ParseCron's error for a zone that is not an IANA time zone
// this machine knows: the zone is at fault, not the expression.
type ZoneError struct {
	Zone   string
	Reason string // "unknown time zone", or what to give instead
}

func (e *ZoneError) Error() string { return fmt.Sprintf("cron zone %q: %s", e.Zone, e.Reason) }

// Cron is a five-field cron expression evaluated in an IANA time zone; make
// one with ParseCron. A Cron is immutable and safe for concurrent use.
type Cron struct {
	expr string // as written, fields separated by single spaces
	zone string // IANA name, "UTC" by default
	loc  *time.Location

	// Bit i of each set is value i: minutes 0-59, hours 0-23, days of month
	// 1-31, months 1-12, weekdays 0-6 (Sunday 0).
	minutes, hours, doms, months, dows uint64
	// domStar and dowStar are set when the field starts with *; if neither
	// is, a day matches when either field does (Vixie cron).
	domStar, dowStar bool
	// fixed is set for a fixed-time entry: neither the minute nor the hour
	// field starts with *. Only those are moved by DST (see ParseCron).
	fixed bool

	firstMin, lastMin int   // first and last fire time of a day, in minutes since midnight
	dayGap            int64 // shortest gap within one day in seconds; 0 if it fires once a day
	interval          time.Duration
}

// cronField describes one of the five fields.
type cronField struct {
	name     string
	min, max int
	names    []string // accepted names, names[i] meaning nameBase+i
	nameBase int
	nameKind string // "month name (jan-dec)"
}

var (
	minuteField = cronField{name: "minute", min: 0, max: 59}
	hourField   = cronField{name: "hour", min: 0, max: 23}
	domField    = cronField{name: "day-of-month", min: 1, max: 31}
	monthField  = cronField{
		name: "month", min: 1, max: 12, nameBase: 1, nameKind: "month name (jan-dec)",
		names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"},
	}
	// dowField allows 7, another name for Sunday (0).
	dowField = cronField{
		name: "day-of-week", min: 0, max: 7, nameBase: 0, nameKind: "day name (sun-sat)",
		names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"},
	}
)

// atForms are the @ shorthands and the expressions they stand for.
var atForms = map[string]string{
	"@hourly":   "0 * * * *",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@weekly":   "0 0 * * 0",
	"@monthly":  "0 0 1 * *",
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
}

const (
	// zoneMargin bounds, in seconds, how far an instant is from the wall
	// time it shows: UTC offsets stay within ±16h (local mean times
	// included).
	zoneMargin = 16 * 3600
	// horizonDays bounds Next's search: a whole Gregorian cycle (400
	// years) and a week. An accepted expression fires far sooner (the
	// rarest, such as Feb 29 on a Sunday, within about 40 years).
	horizonDays = 146097 + 7
	// intervalDays is the span Interval is measured over.
	intervalDays = 400
)

// ParseCron parses a five-field cron expression, or one of @hourly, @daily,
// @midnight, @weekly, @monthly, @yearly and @annually, evaluated in zone (an
// IANA name such as "Europe/Madrid"; "" means UTC).
//
// The fields are minute (0-59), hour (0-23), day of month (1-31), month
// (1-12 or jan-dec) and day of week (0-7, 0 and 7 both Sunday, or sun-sat),
// separated by spaces or tabs; names are case-insensitive. Each field is a
// comma list of *, N, N-M, */S, N-M/S and N/S (N to the field's maximum,
// step S); names work in ranges (mon-fri, and fri-sun for Friday to
// Sunday). There is no seconds field. If both the day-of-month and the
// day-of-week fields are restricted (neither starts with *), a day matches
// when either does; otherwise both must (Vixie cron).
//
// DST follows cronie. A fixed-time entry (neither minute nor hour starts
// with *: "30 2 * * *", "0 6,18 * * *") whose wall time is skipped by a
// spring-forward fires once, as if the old offset still held: 02:30 in
// Europe/Madrid on 2027-03-28 fires at 03:30 CEST, once even if 03:30 is a
// fire time of its own; one whose wall time occurs twice fires once, at the
// first occurrence. Other entries ("*/15 * * * *", "0 * * * *") follow real
// time: no fire times in the skipped hour, both occurrences of a repeated
// one.
//
// Errors are one line naming the field and the problem:
// `cron "61 * * * *": minute field: 61 is out of range 0-59`. An expression
// that can never fire ("0 0 31 2 *") is an error, as is an unknown zone (a
// *ZoneError).
func ParseCron(expr, zone string) (*Cron, error) {
	written := strings.TrimSpace(expr)
	fields := strings.Fields(written)
	spec := fields
	if strings.HasPrefix(written, "@") {
		form, ok := atForms[strings.ToLower(written)]
		if !ok {
			return nil, fmt.Errorf("cron %q: unknown @ form (want @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually)", written)
		}
		spec = strings.Fields(form)
	} else if len(fields) != 5 {
		return nil, fmt.Errorf("cron %q: want 5 fields (minute hour day-of-month month day-of-week) or an @ form, got %d", written, len(fields))
	}

	c := &Cron{expr: strings.Join(fields, " ")}
	for i, f := range []struct {
		field cronField
		set   *uint64
	}{
		{minuteField, &c.minutes},
		{hourField, &c.hours},
		{domField, &c.doms},
		{monthField, &c.months},
		{dowField, &c.dows},
	} {
		set, err := f.field.parse(spec[i])
		if err != nil {
			return nil, fmt.Errorf("cron %q: %s field: %w", written, f.field.name, err)
		}
		*f.set = set
	}
	c.domStar = strings.HasPrefix(spec[2], "*")
	c.dowStar = strings.HasPrefix(spec[4], "*")
	c.fixed = !strings.HasPrefix(spec[0], "*") && !strings.HasPrefix(spec[1], "*")
	if !c.everFires() {
		return nil, fmt.Errorf("cron %q: never fires", written)
	}

	switch zone {
	case "", "UTC":
		c.zone, c.loc = "UTC", time.UTC
	case "Local":
		// Local is whatever the machine is set to: replicas could disagree.
		return nil, &ZoneError{Zone: zone, Reason: "want an IANA name such as Europe/Madrid"}
	default:
		loc, err := time.LoadLocation(zone)
		if err != nil {
			return nil, &ZoneError{Zone: zone, Reason: "unknown time zone"}
		}
		c.zone, c.loc = zone, loc
	}

	c.dayTimes()
	c.interval = c.computeInterval()
	return c, nil
}

// Next returns the first fire time strictly after t, in the Cron's
// location, or the zero time if there is none within 400 years (which does
// not happen for an expression ParseCron accepts).
func (c *Cron) Next(t time.Time) time.Time {
	// Fire times are whole seconds (whole minutes of the wall clock), so
	// one is after t exactly when it is after t's whole second.
	next, ok := c.next(t.Unix())
	if !ok {
		return time.Time{}
	}
	return time.Unix(next, 0).In(c.loc)
}

// String is the trigger as written, with single spaces between fields:
// "cron 0 6 * * 1-5 Europe/Madrid", or "cron 0 6 * * 1-5" in UTC.
func (c *Cron) String() string {
	if c.zone == "UTC" {
		return "cron " + c.expr
	}
	return "cron " + c.expr + " " + c.zone
}

// Zone is the IANA zone name the expression is evaluated in ("UTC" when
// ParseCron was given "").
func (c *Cron) Zone() string { return c.zone }

// Interval is the shortest gap between two consecutive fire times in the
// 400 days from 2001-01-01 on the zone's wall clock, computed once by
// ParseCron: 15m for "*/15 * * * *", 24h for "0 6 * * *" and for
// "0 6 * * 1-5". DST can make it shorter than the wall-clock spacing: for
// "30 2 * * *" in Europe/Madrid it is 23h (from the spring-forward day,
// when 02:30 runs at 03:30, to 02:30 the day after). If fewer than two fire
// times fall in those 400 days ("0 0 29 2 *"), it is the gap between the
// first two after 2001-01-01 (four years).
func (c *Cron) Interval() time.Duration { return c.interval }

// parse reads one field into a bit set.
func (f cronField) parse(s string) (uint64, error) {
	var set uint64
	for item := range strings.SplitSeq(s, ",") {
		if item == "" {
			return 0, fmt.Errorf("empty item in list %q", s)
		}
		rng, stepText, hasStep := strings.Cut(item, "/")
		step := 1
		if hasStep {
			var err error
			if step, err = f.step(item, stepText); err != nil {
				return 0, err
			}
		}
		lo, hi, err := f.span(item, rng, hasStep)
		if err != nil {
			return 0, err
		}
		for v := lo; v <= hi; v += step {
			set |= 1 << v
		}
	}
	if f.max == 7 && set&(1<<7) != 0 { // day of week: 7 is Sunday
		set = set&^(1<<7) | 1
	}
	return set, nil
}

// step reads the S of */S, N-M/S or N/S.
func (f cronField) step(item, s string) (int, error) {
	switch {
	case s == "":
		return 0, fmt.Errorf("%q: empty step", item)
	case strings.Contains(s, "/"):
		return 0, fmt.Errorf("%q: more than one step", item)
	case !allDigits(s):
		return 0, fmt.Errorf("%q: step %q is not a number", item, s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > f.max {
		return 0, fmt.Errorf("%q: step %s is out of range 1-%d", item, s, f.max)
	}
	return n, nil
}

// span reads the range part of an item (before any /).
func (f cronField) span(item, rng string, hasStep bool) (lo, hi int, err error) {
	switch {
	case rng == "":
		return 0, 0, fmt.Errorf("%q: nothing before the step", item)
	case rng == "*":
		return f.min, f.max, nil
	case strings.Count(rng, "-") > 1:
		return 0, 0, fmt.Errorf("%q is not a range (want N-M)", rng)
	case strings.Contains(rng, "-"):
		a, b, _ := strings.Cut(rng, "-")
		if a == "" || b == "" {
			return 0, 0, fmt.Errorf("range %q is missing a bound", rng)
		}
		if lo, err = f.value(a); err != nil {
			return 0, 0, err
		}
		if hi, err = f.value(b); err != nil {
			return 0, 0, err
		}
		if f.max == 7 && lo > 0 && hi == 0 && strings.EqualFold(b, "sun") {
			hi = 7 // fri-sun: Sunday as the end of a week
		}
		if lo > hi {
			return 0, 0, fmt.Errorf("range %s is reversed (want low-high)", rng)
		}
		return lo, hi, nil
	default:
		if lo, err = f.value(rng); err != nil {
			return 0, 0, err
		}
		if hasStep {
			return lo, f.max, nil // N/S: N to the maximum
		}
		return lo, lo, nil
	}
}

// value reads a number or a name.
func (f cronField) value(s string) (int, error) {
	if allDigits(s) {
		n, err := strconv.Atoi(s)
		if err != nil || n < f.min || n > f.max {
			return 0, fmt.Errorf("%s is out of range %d-%d", s, f.min, f.max)
		}
		return n, nil
	}
	for i, name := range f.names {
		if strings.EqualFold(s, name) {
			return f.nameBase + i, nil
		}
	}
	if f.names != nil {
		return 0, fmt.Errorf("%q is not a number or a %s", s, f.nameKind)
	}
	return 0, fmt.Errorf("%q is not a number", s)
}

// allDigits reports whether s is a non-empty run of ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// everFires reports whether some date matches the day fields. If both day
// fields are restricted, every month has every weekday, so yes. Otherwise
// both must match: it is enough that some selected month has a selected day
// of month, because every date (Feb 29 included) falls on every weekday in
// some year of the Gregorian cycle.
func (c *Cron) everFires() bool {
	if !c.domStar && !c.dowStar {
		return true
	}
	for m := 1; m <= 12; m++ {
		if c.months&(1<<m) != 0 && c.doms&(1<<(daysIn(2000, m)+1)-1) != 0 {
			return true
		}
	}
	return false
}

// dayTimes fills firstMin, lastMin and dayGap from the hour and minute sets.
func (c *Cron) dayTimes() {
	c.firstMin, c.lastMin, c.dayGap = -1, -1, 0
	for h := range setBits(c.hours) {
		for m := range setBits(c.minutes) {
			w := h*60 + m
			if c.lastMin >= 0 && (c.dayGap == 0 || int64(w-c.lastMin)*60 < c.dayGap) {
				c.dayGap = int64(w-c.lastMin) * 60
			}
			if c.firstMin < 0 {
				c.firstMin = w
			}
			c.lastMin = w
		}
	}
}

// computeInterval measures the shortest gap between consecutive fire times
// over intervalDays from 2001-01-01 (see Interval). Ordinary days contribute
// their first and last fire time and dayGap; days near a transition
// contribute every fire time.
func (c *Cron) computeInterval() time.Duration {
	var (
		fires []int64
		gap   = int64(math.MaxInt64)
		buf   [4]period
	)
	d := civilOf(2001, time.January, 1)
	for range intervalDays {
		if c.matches(d) {
			start := d.n * 86400
			ps := c.periods(start-zoneMargin, start+86400+zoneMargin, buf[:0])
			if len(ps) == 1 {
				fires = append(fires,
					start+int64(c.firstMin)*60-ps[0].off,
					start+int64(c.lastMin)*60-ps[0].off)
				if c.dayGap > 0 {
					gap = min(gap, c.dayGap)
				}
			} else {
				c.eachOnDay(start, ps, func(x int64) { fires = append(fires, x) })
			}
		}
		d.next()
	}
	slices.Sort(fires)
	fires = slices.Compact(fires)
	for i := 1; i < len(fires); i++ {
		gap = min(gap, fires[i]-fires[i-1])
	}
	if gap == math.MaxInt64 {
		// Fewer than two fire times in the window: a yearly Feb 29 or
		// rarer. Take the first two after the reference.
		a, ok := c.next(civilOf(2001, time.January, 1).n*86400 - zoneMargin)
		if !ok {
			return 0
		}
		b, ok := c.next(a)
		if !ok {
			return 0
		}
		gap = b - a
	}
	return mulDuration(time.Second, gap)
}

// next is Next in Unix seconds: the first fire time after the second after.
func (c *Cron) next(after int64) (int64, bool) {
	y, m, dd := time.Unix(after, 0).In(c.loc).Date()
	// Start two days early: near a transition, the wall times of a day
	// can resolve to instants that show a later date.
	d := civilOf(y, m, dd-2)
	var (
		best  = int64(math.MaxInt64)
		found bool
		buf   [4]period
	)
	for i := 0; i < horizonDays; {
		start := d.n * 86400 // the day's wall-clock midnight, read as UTC
		if found && start-zoneMargin >= best {
			break // no later day can have an earlier fire time
		}
		if c.months&(1<<d.m) == 0 {
			i += d.nextMonth()
			continue
		}
		if c.matches(d) {
			if x, ok := c.firstOnDay(start, after, buf[:0]); ok && x < best {
				best, found = x, true
			}
		}
		d.next()
		i++
	}
	return best, found
}

// matches reports whether the date matches the month and day fields.
func (c *Cron) matches(d civilDay) bool {
	if c.months&(1<<d.m) == 0 {
		return false
	}
	dom := c.doms&(1<<d.d) != 0
	dow := c.dows&(1<<d.wd) != 0
	if c.domStar || c.dowStar {
		return dom && dow
	}
	return dom || dow
}

// firstOnDay returns the first fire time after the second after among the
// wall times of the day whose wall-clock midnight, read as UTC, is start.
func (c *Cron) firstOnDay(start, after int64, buf []period) (int64, bool) {
	ps := c.periods(start-zoneMargin, start+86400+zoneMargin, buf)
	if len(ps) == 1 {
		// One offset all day: wall time W fires at W-off, in order.
		off := ps[0].off
		from := 0 // first minute of the day that is after `after`
		if sec := after + off - start; sec >= 0 {
			if sec >= 86400 {
				return 0, false
			}
			from = int(sec/60) + 1
		}
		h, m, ok := c.firstFrom(from)
		if !ok {
			return 0, false
		}
		return start + int64(h)*3600 + int64(m)*60 - off, true
	}
	best, found := int64(math.MaxInt64), false
	c.eachOnDay(start, ps, func(x int64) {
		if x > after && x < best {
			best, found = x, true
		}
	})
	return best, found
}

// firstFrom returns the first matching hour and minute at or after minute
// from of the day.
func (c *Cron) firstFrom(from int) (h, m int, ok bool) {
	if from >= 1440 {
		return 0, 0, false
	}
	h = nextBit(c.hours, from/60)
	if h < 0 {
		return 0, 0, false
	}
	m0 := 0
	if h == from/60 {
		m0 = from % 60
	}
	if m = nextBit(c.minutes, m0); m < 0 {
		if h = nextBit(c.hours, h+1); h < 0 {
			return 0, 0, false
		}
		m = nextBit(c.minutes, 0)
	}
	return h, m, true
}

// eachOnDay calls yield with the fire times of every matching wall time of
// the day whose wall-clock midnight, read as UTC, is start, given the
// offsets ps in force around it.
func (c *Cron) eachOnDay(start int64, ps []period, yield func(int64)) {
	for h := range setBits(c.hours) {
		for m := range setBits(c.minutes) {
			c.resolve(start+int64(h)*3600+int64(m)*60, ps, yield)
		}
	}
}

// resolve calls yield with the fire times of wall time w (seconds since
// 1970-01-01 00:00 on the wall clock, read as UTC): the instants w-off for
// each offset off in force at w-off, all of them for an entry that follows
// real time, the first for a fixed-time entry. If none (w is skipped), a
// fixed-time entry fires at w minus the offset in force before the
// transition.
func (c *Cron) resolve(w int64, ps []period, yield func(int64)) {
	for _, p := range ps { // in time order, so the first hit is the first occurrence
		if x := w - p.off; x >= p.start && x < p.end {
			yield(x)
			if c.fixed {
				return
			}
		}
	}
	if !c.fixed {
		return
	}
	for i := 0; i+1 < len(ps); i++ {
		if t := ps[i].end; t+ps[i].off <= w && w < t+ps[i+1].off {
			yield(w - ps[i].off)
			return
		}
	}
}

// period is a span of instants [start, end) with one UTC offset, in
// seconds.
type period struct{ start, end, off int64 }

// periods lists, in time order, the spans of one offset covering the
// instants lo to hi; neighbours with equal offsets are merged.
func (c *Cron) periods(lo, hi int64, buf []period) []period {
	ps := buf
	t := time.Unix(lo, 0).In(c.loc)
	for range 64 {
		_, off := t.Zone()
		s, e := t.ZoneBounds()
		p := period{start: math.MinInt64, end: math.MaxInt64, off: int64(off)}
		if !s.IsZero() {
			p.start = s.Unix()
		}
		if !e.IsZero() {
			p.end = e.Unix()
		}
		if n := len(ps); n > 0 && ps[n-1].off == p.off {
			ps[n-1].end = p.end
		} else {
			ps = append(ps, p)
		}
		if p.end > hi || p.end <= t.Unix() {
			break
		}
		t = time.Unix(p.end, 0).In(c.loc)
	}
	return ps
}

// civilDay is a date of the proleptic Gregorian calendar.
type civilDay struct {
	y, m, d int   // month 1-12
	wd      int   // weekday, Sunday 0
	n       int64 // days since 1970-01-01
}

// civilOf returns the date y-m-d, normalized as time.Date does.
func civilOf(y int, m time.Month, d int) civilDay {
	t := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	y, m, d = t.Date()
	return civilDay{y: y, m: int(m), d: d, wd: int(t.Weekday()), n: t.Unix() / 86400}
}

// next moves to the following day.
func (d *civilDay) next() {
	d.n++
	d.wd = (d.wd + 1) % 7
	if d.d++; d.d > daysIn(d.y, d.m) {
		d.d = 1
		if d.m++; d.m > 12 {
			d.m, d.y = 1, d.y+1
		}
	}
}

// nextMonth moves to the first of the following month and returns the
// number of days moved.
func (d *civilDay) nextMonth() int {
	skip := daysIn(d.y, d.m) - d.d + 1
	d.n += int64(skip)
	d.wd = (d.wd + skip) % 7
	d.d = 1
	if d.m++; d.m > 12 {
		d.m, d.y = 1, d.y+1
	}
	return skip
}

// daysIn returns the number of days in month m (1-12) of year y.
func daysIn(y, m int) int {
	switch m {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// nextBit returns the lowest set bit of set at or above from, or -1.
func nextBit(set uint64, from int) int {
	if from >= 64 {
		return -1
	}
	if s := set &^ (1<<uint(from) - 1); s != 0 {
		return bits.TrailingZeros64(s)
	}
	return -1
}

// setBits yields the set bits of set, lowest first.
func setBits(set uint64) func(yield func(int) bool) {
	return func(yield func(int) bool) {
		for set != 0 {
			i := bits.TrailingZeros64(set)
			if !yield(i) {
				return
			}
			set &^= 1 << i
		}
	}
}
