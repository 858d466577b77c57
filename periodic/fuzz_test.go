package periodic

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fuzzZones are the zones FuzzParseCron evaluates in: no shift, one-hour
// shifts north and south, transitions at midnight (Santiago), half-hour
// (Lord_Howe) and two-hour (Troll) shifts, odd offsets (Kolkata, Chatham,
// St_Johns), a Ramadan DST (Casablanca) and a skipped day (Apia, 2011).
var fuzzZones = []string{
	"", "UTC", "Europe/Madrid", "America/New_York", "Australia/Sydney",
	"America/Santiago", "Australia/Lord_Howe", "Antarctica/Troll", "Asia/Kolkata",
	"Pacific/Chatham", "America/St_Johns", "Africa/Casablanca", "Pacific/Apia",
}

// fuzzSpan is the range of instants tried: 1970 to 2100.
const fuzzSpan = 4102444800

// FuzzParseCron checks that ParseCron never panics and that whatever it
// accepts has a sane Next: zero or strictly later, increasing, on whole
// minutes, in the Cron's location, matching the fields where no transition
// is near, with no earlier fire time skipped.
func FuzzParseCron(f *testing.F) {
	seeds := []string{
		// Valid.
		"* * * * *", "*/15 * * * *", "0 * * * *", "30 2 * * *", "0 6 * * 1-5",
		"0,30 2,3 * * *", "15 2 * * *", "45 1 * * *", "30 23 * * *", "30 0 * * *",
		"0-10/5 2 * * *", "30 */2 * * *", "5/15 * * * *", "10-50/20 * * * *",
		"0 0 29 2 *", "0 0 29 2 */7", "0 0 */31 2 mon", "0 0 13 * fri", "0 8 * * 5-7",
		"0 8 * * fri-sun", "0 12 1 jan-mar,DEC *", "59 23 31 12 *", "0 0 31 * *",
		"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually",
		" \t0\t6  * *   *  ", "0-59/7 0-23/5 1-31/3 1-12/2 0-7/4",
		// Invalid.
		"61 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 8",
		"*/0 * * * *", "*/ * * * *", "*/2/3 * * * *", "5-1 * * * *", "1,2, * * * *",
		"* * * *", "* * * * * *", "", "@reboot", "0 0 31 2 *", "0 0 30 feb *",
		"jan * * * *", "0 0 * * funday", "-1 * * * *", "1-2-3 * * * *", "/5 * * * *",
		"99999999999999999999 * * * *", "0 0 ? * mon", "\x00 * * * *", "ñ * * * *",
	}
	// Instants near 2027's transitions, and ordinary ones.
	instants := []int64{
		1806193800, // 2027-03-28 00:30 UTC, before Madrid springs forward
		1824942000, // 2027-10-31 00:20 UTC, before Madrid falls back
		1805006400, // 2027-03-14 06:40 UTC, before New York springs forward
		1825565400, // 2027-11-07 05:30 UTC, New York's first 01:30
		1806766800, // 2027-04-03 15:40 UTC, Sydney and Lord Howe fall back
		1822492200, // 2027-10-02 15:50 UTC, Sydney and Lord Howe spring forward
		1820115000, // 2027-09-05 03:30 UTC, before Santiago springs forward
		1806806400, // 2027-04-04 02:40 UTC, before Santiago falls back
		1798761600, // 2027-01-01 00:00 UTC
		0, fuzzSpan - 1,
	}
	for i, expr := range seeds {
		f.Add(expr, uint8(i), instants[i%len(instants)])
	}

	f.Fuzz(func(t *testing.T, expr string, zoneIndex uint8, sec int64) {
		zone := fuzzZones[int(zoneIndex)%len(fuzzZones)]
		c, err := ParseCron(expr, zone)
		if err != nil {
			require.Nil(t, c)
			require.True(t, strings.HasPrefix(err.Error(), "cron "), err.Error())
			require.NotContains(t, err.Error(), "\n")
			return
		}

		// What String shows parses back to the same trigger.
		again, err := ParseCron(c.expr, zone)
		require.NoError(t, err)
		require.Equal(t, c.String(), again.String())
		require.Equal(t, [5]uint64{c.minutes, c.hours, c.doms, c.months, c.dows}, [5]uint64{again.minutes, again.hours, again.doms, again.months, again.dows})
		require.True(t, strings.HasPrefix(c.String(), "cron "))
		require.GreaterOrEqual(t, c.Interval(), time.Minute)

		sec %= fuzzSpan
		if sec < 0 {
			sec += fuzzSpan
		}
		for _, at := range []time.Time{
			time.Unix(sec, 0),
			time.Unix(sec, 999_999_999),
			time.Unix(sec-sec%60, 0).In(c.loc),
		} {
			fuzzCheckNext(t, c, at)
		}
	})
}

// fuzzCheckNext checks Next(at) and Next(Next(at)).
func fuzzCheckNext(t *testing.T, c *Cron, at time.Time) {
	t.Helper()
	next := c.Next(at)
	require.False(t, next.IsZero(), "%s: Next(%v) is zero", c, at)
	require.True(t, next.After(at), "%s: Next(%v) = %v", c, at, next)
	require.Equal(t, c.loc, next.Location())
	require.Zero(t, next.Second())
	require.Zero(t, next.Nanosecond())

	after := c.Next(next)
	require.True(t, after.After(next), "%s: Next(%v) = %v", c, next, after)

	// Away from transitions (one offset from well before at to well after
	// next), fire times are exactly the matching wall times: next matches,
	// and no minute between at and next does. Near one, next is the first
	// fire time after at that the oracle computes.
	if next.Sub(at) > 48*time.Hour {
		if ps := c.periods(next.Unix()-zoneMargin, next.Unix()+zoneMargin, nil); len(ps) == 1 {
			require.True(t, fuzzWallMatches(c, next), "%s: Next(%v) = %v does not match the fields", c, at, next)
		}
		return
	}
	if ps := c.periods(at.Unix()-zoneMargin, next.Unix()+zoneMargin, nil); len(ps) == 1 {
		require.True(t, fuzzWallMatches(c, next), "%s: Next(%v) = %v does not match the fields", c, at, next)
		for x := at.Truncate(time.Minute).Add(time.Minute); x.Before(next); x = x.Add(time.Minute) {
			require.False(t, fuzzWallMatches(c, x), "%s: Next(%v) = %v skips %v", c, at, next, x.In(c.loc))
		}
		return
	}
	fires := oracleFires(c, at, next)
	i, _ := slices.BinarySearch(fires, at.Unix()+1)
	require.Less(t, i, len(fires), "%s: the oracle has no fire time after %v", c, at)
	require.Equal(t, fires[i], next.Unix(), "%s: Next(%v) = %v, the oracle says %v", c, at, next, time.Unix(fires[i], 0).In(c.loc))
}

// fuzzWallMatches reports whether the wall time of x in c's zone matches
// every field (Vixie's day rule included).
func fuzzWallMatches(c *Cron, x time.Time) bool {
	w := x.In(c.loc)
	has := func(set uint64, v int) bool { return set&(1<<v) != 0 }
	dom, dow := has(c.doms, w.Day()), has(c.dows, int(w.Weekday()))
	day := dom && dow
	if !c.domStar && !c.dowStar {
		day = dom || dow
	}
	return day && has(c.minutes, w.Minute()) && has(c.hours, w.Hour()) && has(c.months, int(w.Month()))
}

// TestCron_NextOracle compares Next with oracleFires around every
// transition of 2026 and 2027 in the fuzz zones, for entries of both kinds.
func TestCron_NextOracle(t *testing.T) {
	t.Parallel()

	exprs := []string{
		"* * * * *", "*/15 * * * *", "0 * * * *", "30 */2 * * *", "7,37 * * * *", "*/20 1-3 * * *",
		"30 2 * * *", "0,30 2,3 * * *", "15 2 * * *", "45 1 * * *", "30 23 * * *", "0 0 * * *",
		"0-10/5 2 * * *", "0 1,3,6 * * *", "59 23 * * *", "0-59/13 0-4,22-23 * * *", "0 2 * * sun",
	}
	for _, zone := range fuzzZones[1:] {
		t.Run(zone, func(t *testing.T) {
			t.Parallel()
			loc, err := time.LoadLocation(zone)
			require.NoError(t, err)
			var transitions []time.Time
			for at := time.Date(2026, 1, 1, 0, 0, 0, 0, loc); at.Year() < 2028; {
				_, end := at.ZoneBounds()
				if end.IsZero() {
					break
				}
				transitions = append(transitions, end)
				at = end
			}
			for _, expr := range exprs {
				c, err := ParseCron(expr, zone)
				require.NoError(t, err)
				for _, tr := range transitions {
					// The oracle is complete well past cutoff.
					from, to := tr.Add(-30*time.Hour), tr.Add(30*time.Hour)
					cutoff := to.Add(24 * time.Hour).Unix()
					fires := oracleFires(c, from, to)
					for at := from; at.Before(to); at = at.Add(31 * time.Minute) {
						next := c.Next(at)
						i, _ := slices.BinarySearch(fires, at.Unix()+1)
						if i == len(fires) || fires[i] > cutoff {
							require.Greater(t, next.Unix(), cutoff, "%s %q after %v: Next is %v, the oracle has none", zone, expr, at.In(loc), next)
							continue
						}
						require.Equal(t, time.Unix(fires[i], 0).In(loc), next, "%s %q after %v", zone, expr, at.In(loc))
					}
				}
			}
		})
	}
}

// oracleFires lists, sorted, the fire times of c on the wall-clock days
// from a few days before from to a few days after to, by the method of the
// design brief, independent of Cron.periods: for wall time W, the offsets in
// force a day before and a day after give two candidates, each a real
// occurrence if it shows W; two: the first for a fixed-time entry, both
// otherwise; none: W minus the earlier offset for a fixed-time entry,
// nothing otherwise.
func oracleFires(c *Cron, from, to time.Time) []int64 {
	var out []int64
	f := from.In(c.loc)
	for d := civilOf(f.Year(), f.Month(), f.Day()-2); d.n*86400 < to.Unix()+3*86400; d.next() {
		if !c.matches(d) {
			continue
		}
		for h := range 24 {
			for m := range 60 {
				if c.hours&(1<<h) == 0 || c.minutes&(1<<m) == 0 {
					continue
				}
				w := time.Date(d.y, time.Month(d.m), d.d, h, m, 0, 0, time.UTC)
				_, before := w.Add(-24 * time.Hour).In(c.loc).Zone()
				_, after := w.Add(24 * time.Hour).In(c.loc).Zone()
				c1 := w.Add(-time.Duration(before) * time.Second)
				c2 := w.Add(-time.Duration(after) * time.Second)
				shows := func(x time.Time) bool {
					l := x.In(c.loc)
					return l.Year() == d.y && int(l.Month()) == d.m && l.Day() == d.d && l.Hour() == h && l.Minute() == m
				}
				switch ok1, ok2 := shows(c1), shows(c2); {
				case ok1 && ok2 && !c1.Equal(c2) && !c.fixed:
					out = append(out, c1.Unix(), c2.Unix())
				case ok1 && ok2:
					out = append(out, min(c1.Unix(), c2.Unix()))
				case ok1:
					out = append(out, c1.Unix())
				case ok2:
					out = append(out, c2.Unix())
				case c.fixed:
					out = append(out, c1.Unix())
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
