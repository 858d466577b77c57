package periodic_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/periodic"
)

const (
	// utcLayout shows fire times in UTC tests, weekday included.
	utcLayout = "2006-01-02 15:04 Mon"
	// zoneLayout shows fire times in DST tests: the offset tells which
	// occurrence of a repeated wall time it is.
	zoneLayout = "2006-01-02 15:04 -07:00"
)

// parseCron parses expr in zone or fails the test.
func parseCron(t *testing.T, expr, zone string) *periodic.Cron {
	t.Helper()
	c, err := periodic.ParseCron(expr, zone)
	require.NoError(t, err)
	return c
}

// nextN returns the n fire times after from, each formatted with layout,
// checking that each is later than the one before and in tr's zone.
func nextN(t *testing.T, tr periodic.Trigger, from time.Time, n int, layout string) []string {
	t.Helper()
	got := make([]string, 0, n)
	at := from
	for range n {
		next := tr.Next(at)
		require.False(t, next.IsZero(), "Next(%v) is zero", at)
		require.True(t, next.After(at), "Next(%v) = %v, not after", at, next)
		require.Equal(t, tr.Zone(), next.Location().String())
		got = append(got, next.Format(layout))
		at = next
	}
	return got
}

func TestCron_Next(t *testing.T) {
	t.Parallel()

	// 2027-01-01 is a Friday.
	for name, tc := range map[string]struct {
		expr string
		from string // UTC, "2006-01-02 15:04:05"; default 2027-01-01 00:00:00
		want []string
	}{
		"EveryMinute": {
			expr: "* * * * *", from: "2027-01-01 23:57:30",
			want: []string{"2027-01-01 23:58 Fri", "2027-01-01 23:59 Fri", "2027-01-02 00:00 Sat", "2027-01-02 00:01 Sat", "2027-01-02 00:02 Sat"},
		},
		"StepFromStar": {
			expr: "*/15 * * * *", from: "2027-01-01 00:07:00",
			want: []string{"2027-01-01 00:15 Fri", "2027-01-01 00:30 Fri", "2027-01-01 00:45 Fri", "2027-01-01 01:00 Fri", "2027-01-01 01:15 Fri"},
		},
		"StepInRange": {
			expr: "10-50/20 * * * *",
			want: []string{"2027-01-01 00:10 Fri", "2027-01-01 00:30 Fri", "2027-01-01 00:50 Fri", "2027-01-01 01:10 Fri", "2027-01-01 01:30 Fri"},
		},
		"StepFromNumber": {
			expr: "5/15 * * * *",
			want: []string{"2027-01-01 00:05 Fri", "2027-01-01 00:20 Fri", "2027-01-01 00:35 Fri", "2027-01-01 00:50 Fri", "2027-01-01 01:05 Fri"},
		},
		"StepLargerThanTheRange": {
			expr: "1-5/10 0 * * *",
			want: []string{"2027-01-01 00:01 Fri", "2027-01-02 00:01 Sat", "2027-01-03 00:01 Sun", "2027-01-04 00:01 Mon", "2027-01-05 00:01 Tue"},
		},
		"Lists": {
			expr: "0,30 9,17 * * *",
			want: []string{"2027-01-01 09:00 Fri", "2027-01-01 09:30 Fri", "2027-01-01 17:00 Fri", "2027-01-01 17:30 Fri", "2027-01-02 09:00 Sat"},
		},
		"ListOfRangesAndSteps": {
			expr: "0-1,58-59/1 22,23 * * *",
			want: []string{"2027-01-01 22:00 Fri", "2027-01-01 22:01 Fri", "2027-01-01 22:58 Fri", "2027-01-01 22:59 Fri", "2027-01-01 23:00 Fri"},
		},
		"HourRange": {
			expr: "0 9-11 * * *", from: "2027-01-01 10:00:00",
			want: []string{"2027-01-01 11:00 Fri", "2027-01-02 09:00 Sat", "2027-01-02 10:00 Sat", "2027-01-02 11:00 Sat", "2027-01-03 09:00 Sun"},
		},
		"DaysOfMonth": {
			expr: "0 0 1,15 * *",
			want: []string{"2027-01-15 00:00 Fri", "2027-02-01 00:00 Mon", "2027-02-15 00:00 Mon", "2027-03-01 00:00 Mon", "2027-03-15 00:00 Mon"},
		},
		"The31stSkipsShortMonths": {
			expr: "0 0 31 * *",
			want: []string{"2027-01-31 00:00 Sun", "2027-03-31 00:00 Wed", "2027-05-31 00:00 Mon", "2027-07-31 00:00 Sat", "2027-08-31 00:00 Tue"},
		},
		"MonthNamesAndRanges": {
			expr: "0 12 1 jan-mar,DEC *",
			want: []string{"2027-01-01 12:00 Fri", "2027-02-01 12:00 Mon", "2027-03-01 12:00 Mon", "2027-12-01 12:00 Wed", "2028-01-01 12:00 Sat"},
		},
		"MonthNamesMixedCase": {
			expr: "0 12 1 Feb,aUG *",
			want: []string{"2027-02-01 12:00 Mon", "2027-08-01 12:00 Sun", "2028-02-01 12:00 Tue", "2028-08-01 12:00 Tue", "2029-02-01 12:00 Thu"},
		},
		"MonthNumbersWithStep": {
			expr: "0 0 1 */3 *",
			want: []string{"2027-04-01 00:00 Thu", "2027-07-01 00:00 Thu", "2027-10-01 00:00 Fri", "2028-01-01 00:00 Sat", "2028-04-01 00:00 Sat"},
		},
		"Weekdays": {
			expr: "0 8 * * mon-fri",
			want: []string{"2027-01-01 08:00 Fri", "2027-01-04 08:00 Mon", "2027-01-05 08:00 Tue", "2027-01-06 08:00 Wed", "2027-01-07 08:00 Thu"},
		},
		"WeekdaysNumeric": {
			expr: "0 8 * * 1-5",
			want: []string{"2027-01-01 08:00 Fri", "2027-01-04 08:00 Mon", "2027-01-05 08:00 Tue", "2027-01-06 08:00 Wed", "2027-01-07 08:00 Thu"},
		},
		"DayNamesMixedCase": {
			expr: "0 8 * * SAT,Sun",
			want: []string{"2027-01-02 08:00 Sat", "2027-01-03 08:00 Sun", "2027-01-09 08:00 Sat", "2027-01-10 08:00 Sun", "2027-01-16 08:00 Sat"},
		},
		"SundayAs0": {
			expr: "0 8 * * 0",
			want: []string{"2027-01-03 08:00 Sun", "2027-01-10 08:00 Sun", "2027-01-17 08:00 Sun", "2027-01-24 08:00 Sun", "2027-01-31 08:00 Sun"},
		},
		"SundayAs7": {
			expr: "0 8 * * 7",
			want: []string{"2027-01-03 08:00 Sun", "2027-01-10 08:00 Sun", "2027-01-17 08:00 Sun", "2027-01-24 08:00 Sun", "2027-01-31 08:00 Sun"},
		},
		"FriToSunAs5-7": {
			expr: "0 8 * * 5-7",
			want: []string{"2027-01-01 08:00 Fri", "2027-01-02 08:00 Sat", "2027-01-03 08:00 Sun", "2027-01-08 08:00 Fri", "2027-01-09 08:00 Sat"},
		},
		"FriToSunByName": {
			expr: "0 8 * * fri-sun",
			want: []string{"2027-01-01 08:00 Fri", "2027-01-02 08:00 Sat", "2027-01-03 08:00 Sun", "2027-01-08 08:00 Fri", "2027-01-09 08:00 Sat"},
		},
		"WeekdayStep": {
			expr: "0 8 * * */2", // Sunday, Tuesday, Thursday, Saturday
			want: []string{"2027-01-02 08:00 Sat", "2027-01-03 08:00 Sun", "2027-01-05 08:00 Tue", "2027-01-07 08:00 Thu", "2027-01-09 08:00 Sat"},
		},
		"WeekdayFromNameWithStep": {
			expr: "0 8 * * wed/2", // Wednesday, Friday, Sunday (7)
			want: []string{"2027-01-01 08:00 Fri", "2027-01-03 08:00 Sun", "2027-01-06 08:00 Wed", "2027-01-08 08:00 Fri", "2027-01-10 08:00 Sun"},
		},
		"BothDayFieldsRestrictedMatchEither": {
			expr: "0 0 13 * fri", // the 13th, and every Friday
			want: []string{"2027-01-08 00:00 Fri", "2027-01-13 00:00 Wed", "2027-01-15 00:00 Fri", "2027-01-22 00:00 Fri", "2027-01-29 00:00 Fri"},
		},
		"BothRestrictedFeb29OrMondaysOfFebruary": {
			expr: "0 0 29 2 1",
			want: []string{"2027-02-01 00:00 Mon", "2027-02-08 00:00 Mon", "2027-02-15 00:00 Mon", "2027-02-22 00:00 Mon", "2028-02-07 00:00 Mon"},
		},
		"StarredDayOfMonthMatchesBoth": {
			expr: "0 0 */10 * fri", // the 1st, 11th, 21st or 31st, and a Friday
			want: []string{"2027-05-21 00:00 Fri", "2027-06-11 00:00 Fri", "2027-10-01 00:00 Fri", "2027-12-31 00:00 Fri", "2028-01-21 00:00 Fri"},
		},
		"StarredDayOfWeekMatchesBoth": {
			expr: "0 0 13 * */1",
			want: []string{"2027-01-13 00:00 Wed", "2027-02-13 00:00 Sat", "2027-03-13 00:00 Sat", "2027-04-13 00:00 Tue", "2027-05-13 00:00 Thu"},
		},
		"OnlyDayOfMonth": {
			expr: "0 0 13 * *",
			want: []string{"2027-01-13 00:00 Wed", "2027-02-13 00:00 Sat", "2027-03-13 00:00 Sat", "2027-04-13 00:00 Tue", "2027-05-13 00:00 Thu"},
		},
		"OnlyDayOfWeek": {
			expr: "0 0 * * 1",
			want: []string{"2027-01-04 00:00 Mon", "2027-01-11 00:00 Mon", "2027-01-18 00:00 Mon", "2027-01-25 00:00 Mon", "2027-02-01 00:00 Mon"},
		},
		"LeapDay": {
			expr: "0 0 29 2 *",
			want: []string{"2028-02-29 00:00 Tue", "2032-02-29 00:00 Sun", "2036-02-29 00:00 Fri", "2040-02-29 00:00 Wed", "2044-02-29 00:00 Mon"},
		},
		"LeapDayAcross2100": {
			expr: "0 0 29 2 *", from: "2096-03-01 00:00:00",
			want: []string{"2104-02-29 00:00 Fri", "2108-02-29 00:00 Wed"},
		},
		"LeapDayOnASunday": {
			expr: "0 0 29 2 */7", // starred day of week: both must match
			want: []string{"2032-02-29 00:00 Sun", "2060-02-29 00:00 Sun", "2088-02-29 00:00 Sun", "2128-02-29 00:00 Sun"},
		},
		"LastMinuteOfTheYear": {
			expr: "59 23 31 12 *",
			want: []string{"2027-12-31 23:59 Fri", "2028-12-31 23:59 Sun", "2029-12-31 23:59 Mon"},
		},
		"Whitespace": {
			expr: " \t0\t6  * *   *  ",
			want: []string{"2027-01-01 06:00 Fri", "2027-01-02 06:00 Sat", "2027-01-03 06:00 Sun"},
		},
		"LeadingZeros": {
			expr: "05 06 01 01 *",
			want: []string{"2027-01-01 06:05 Fri", "2028-01-01 06:05 Sat"},
		},
		"@hourly": {
			expr: "@hourly", from: "2027-01-01 22:30:00",
			want: []string{"2027-01-01 23:00 Fri", "2027-01-02 00:00 Sat", "2027-01-02 01:00 Sat"},
		},
		"@daily": {
			expr: "@daily",
			want: []string{"2027-01-02 00:00 Sat", "2027-01-03 00:00 Sun", "2027-01-04 00:00 Mon"},
		},
		"@midnight": {
			expr: "@midnight",
			want: []string{"2027-01-02 00:00 Sat", "2027-01-03 00:00 Sun", "2027-01-04 00:00 Mon"},
		},
		"@weekly": {
			expr: "@weekly",
			want: []string{"2027-01-03 00:00 Sun", "2027-01-10 00:00 Sun", "2027-01-17 00:00 Sun"},
		},
		"@monthly": {
			expr: "@monthly",
			want: []string{"2027-02-01 00:00 Mon", "2027-03-01 00:00 Mon", "2027-04-01 00:00 Thu"},
		},
		"@yearly": {
			expr: "@yearly",
			want: []string{"2028-01-01 00:00 Sat", "2029-01-01 00:00 Mon", "2030-01-01 00:00 Tue"},
		},
		"@annually": {
			expr: "@ANNUALLY",
			want: []string{"2028-01-01 00:00 Sat", "2029-01-01 00:00 Mon", "2030-01-01 00:00 Tue"},
		},
		"Before1970": {
			expr: "30 12 * * sun", from: "1969-12-25 00:00:00",
			want: []string{"1969-12-28 12:30 Sun", "1970-01-04 12:30 Sun"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			from := "2027-01-01 00:00:00"
			if tc.from != "" {
				from = tc.from
			}
			c := parseCron(t, tc.expr, "")
			require.Equal(t, tc.want, nextN(t, c, utc(t, from), len(tc.want), utcLayout))
		})
	}

	t.Run("StrictlyAfterAFireTime", func(t *testing.T) {
		t.Parallel()
		c := parseCron(t, "0 * * * *", "")
		require.Equal(t, utc(t, "2027-01-01 11:00:00"), c.Next(utc(t, "2027-01-01 10:00:00")))
		require.Equal(t, utc(t, "2027-01-01 10:00:00"), c.Next(utc(t, "2027-01-01 09:59:59.999999999")))
		require.Equal(t, utc(t, "2027-01-01 11:00:00"), c.Next(utc(t, "2027-01-01 10:00:00.000000001")))
	})

	t.Run("ExtremeTimes", func(t *testing.T) {
		t.Parallel()
		c := parseCron(t, "*/5 * * * *", "")
		require.Equal(t, time.Date(1, 1, 1, 0, 5, 0, 0, time.UTC), c.Next(time.Time{}))
		require.Equal(t, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), c.Next(time.Date(9999, 12, 31, 23, 59, 0, 0, time.UTC)))
		madrid := parseCron(t, "0 6 * * *", "Europe/Madrid")
		require.Equal(t, "0001-01-01 06:00 -00:14", madrid.Next(time.Time{}).Format(zoneLayout)) // local mean time
	})

	t.Run("ReturnsTheCronsLocation", func(t *testing.T) {
		t.Parallel()
		tokyo, err := time.LoadLocation("Asia/Tokyo")
		require.NoError(t, err)
		from := time.Date(2027, 1, 1, 9, 30, 0, 0, tokyo) // 00:30 UTC

		next := parseCron(t, "0 * * * *", "").Next(from)
		require.Equal(t, time.UTC, next.Location())
		require.Equal(t, utc(t, "2027-01-01 01:00:00"), next)

		next = parseCron(t, "0 6 * * *", "Europe/Madrid").Next(from)
		require.Equal(t, "Europe/Madrid", next.Location().String())
		require.Equal(t, "2027-01-01 06:00 +01:00", next.Format(zoneLayout))
	})
}

// TestCron_NextDST checks the DST contract (cronie's) on both transitions of
// 2027 in northern and southern zones. Wall times are given with their
// offset, so a repeated wall time says which occurrence it is.
func TestCron_NextDST(t *testing.T) {
	t.Parallel()

	// The 2027 transitions the cases below rely on (checked in the
	// Transitions subtest): the wall time just before each, with its
	// offset, and the offset after.
	transitions := []struct {
		zone, before, after string
	}{
		{"Europe/Madrid", "2027-03-28 01:59:59 +01:00", "+02:00"}, // 02:00-02:59 skipped
		{"Europe/Madrid", "2027-10-31 02:59:59 +02:00", "+01:00"}, // 02:00-02:59 twice
		{"America/New_York", "2027-03-14 01:59:59 -05:00", "-04:00"},
		{"America/New_York", "2027-11-07 01:59:59 -04:00", "-05:00"},    // 01:00-01:59 twice
		{"Australia/Sydney", "2027-04-04 02:59:59 +11:00", "+10:00"},    // 02:00-02:59 twice
		{"Australia/Sydney", "2027-10-03 01:59:59 +10:00", "+11:00"},    // 02:00-02:59 skipped
		{"America/Santiago", "2027-04-03 23:59:59 -03:00", "-04:00"},    // Sat 23:00-23:59 twice
		{"America/Santiago", "2027-09-04 23:59:59 -04:00", "-03:00"},    // Sun 00:00-00:59 skipped
		{"Australia/Lord_Howe", "2027-04-04 01:59:59 +11:00", "+10:30"}, // 01:30-01:59 twice
		{"Australia/Lord_Howe", "2027-10-03 01:59:59 +10:30", "+11:00"}, // 02:00-02:29 skipped
	}
	t.Run("Transitions", func(t *testing.T) {
		t.Parallel()
		for _, tr := range transitions {
			loc, err := time.LoadLocation(tr.zone)
			require.NoError(t, err)
			before, err := time.Parse("2006-01-02 15:04:05 -07:00", tr.before)
			require.NoError(t, err)
			_, end := before.In(loc).ZoneBounds()
			require.True(t, before.Add(time.Second).Equal(end), "%s: no transition right after %s (next at %v)", tr.zone, tr.before, end)
			require.Equal(t, tr.before, before.In(loc).Format("2006-01-02 15:04:05 -07:00"), tr.zone)
			require.Equal(t, tr.after, end.In(loc).Format("-07:00"), tr.zone)
		}
	})

	for name, tc := range map[string]struct {
		zone, expr, from string
		want             []string
	}{
		// Europe/Madrid: 2027-03-28 02:00 CET → 03:00 CEST; 2027-10-31
		// 03:00 CEST → 02:00 CET.
		"Madrid/GapFixedRunsAnHourLater": {
			zone: "Europe/Madrid", expr: "30 2 * * *", from: "2027-03-27 00:00 +01:00",
			want: []string{"2027-03-27 02:30 +01:00", "2027-03-28 03:30 +02:00", "2027-03-29 02:30 +02:00"},
		},
		"Madrid/GapFixedFromInsideTheShiftedHour": {
			zone: "Europe/Madrid", expr: "30 2 * * *", from: "2027-03-28 03:10 +02:00",
			want: []string{"2027-03-28 03:30 +02:00", "2027-03-29 02:30 +02:00"},
		},
		"Madrid/GapFixedCoincidingRunsOnce": {
			zone: "Europe/Madrid", expr: "30 2,3 * * *", from: "2027-03-28 00:00 +01:00",
			want: []string{"2027-03-28 03:30 +02:00", "2027-03-29 02:30 +02:00", "2027-03-29 03:30 +02:00"},
		},
		"Madrid/GapFixedRange": {
			zone: "Europe/Madrid", expr: "58-59,0-1 2 * * *", from: "2027-03-28 00:00 +01:00",
			want: []string{"2027-03-28 03:00 +02:00", "2027-03-28 03:01 +02:00", "2027-03-28 03:58 +02:00", "2027-03-28 03:59 +02:00", "2027-03-29 02:00 +02:00"},
		},
		"Madrid/RepeatFixedRunsAtTheFirst": {
			zone: "Europe/Madrid", expr: "30 2 * * *", from: "2027-10-30 00:00 +02:00",
			want: []string{"2027-10-30 02:30 +02:00", "2027-10-31 02:30 +02:00", "2027-11-01 02:30 +01:00"},
		},
		"Madrid/RepeatFixedFromTheSecondPass": {
			zone: "Europe/Madrid", expr: "30 2 * * *", from: "2027-10-31 02:15 +01:00",
			want: []string{"2027-11-01 02:30 +01:00"},
		},
		"Madrid/RepeatFixedRange": {
			zone: "Europe/Madrid", expr: "0-10/5 2 * * *", from: "2027-10-31 01:00 +02:00",
			want: []string{"2027-10-31 02:00 +02:00", "2027-10-31 02:05 +02:00", "2027-10-31 02:10 +02:00", "2027-11-01 02:00 +01:00"},
		},
		"Madrid/Every15Spring": {
			zone: "Europe/Madrid", expr: "*/15 * * * *", from: "2027-03-28 01:30 +01:00",
			want: []string{"2027-03-28 01:45 +01:00", "2027-03-28 03:00 +02:00", "2027-03-28 03:15 +02:00"},
		},
		"Madrid/Every15Fall": {
			zone: "Europe/Madrid", expr: "*/15 * * * *", from: "2027-10-31 02:30 +02:00",
			want: []string{"2027-10-31 02:45 +02:00", "2027-10-31 02:00 +01:00", "2027-10-31 02:15 +01:00", "2027-10-31 02:30 +01:00", "2027-10-31 02:45 +01:00", "2027-10-31 03:00 +01:00"},
		},
		"Madrid/HourlySpring": {
			zone: "Europe/Madrid", expr: "0 * * * *", from: "2027-03-28 00:30 +01:00",
			want: []string{"2027-03-28 01:00 +01:00", "2027-03-28 03:00 +02:00", "2027-03-28 04:00 +02:00"},
		},
		"Madrid/HourlyFall": {
			zone: "Europe/Madrid", expr: "0 * * * *", from: "2027-10-31 00:30 +02:00",
			want: []string{"2027-10-31 01:00 +02:00", "2027-10-31 02:00 +02:00", "2027-10-31 02:00 +01:00", "2027-10-31 03:00 +01:00"},
		},
		"Madrid/StarredHourSkipsTheGap": {
			zone: "Europe/Madrid", expr: "30 */2 * * *", from: "2027-03-28 00:00 +01:00",
			want: []string{"2027-03-28 00:30 +01:00", "2027-03-28 04:30 +02:00", "2027-03-28 06:30 +02:00"},
		},
		"Madrid/StarredHourRunsBothPasses": {
			zone: "Europe/Madrid", expr: "30 */2 * * *", from: "2027-10-31 00:00 +02:00",
			want: []string{"2027-10-31 00:30 +02:00", "2027-10-31 02:30 +02:00", "2027-10-31 02:30 +01:00", "2027-10-31 04:30 +01:00"},
		},
		"Madrid/FixedOutsideSpring": {
			zone: "Europe/Madrid", expr: "0 1,3,6 * * *", from: "2027-03-27 07:00 +01:00",
			want: []string{"2027-03-28 01:00 +01:00", "2027-03-28 03:00 +02:00", "2027-03-28 06:00 +02:00", "2027-03-29 01:00 +02:00"},
		},
		"Madrid/FixedOutsideFall": {
			zone: "Europe/Madrid", expr: "0 1,3,6 * * *", from: "2027-10-30 07:00 +02:00",
			want: []string{"2027-10-31 01:00 +02:00", "2027-10-31 03:00 +01:00", "2027-10-31 06:00 +01:00", "2027-11-01 01:00 +01:00"},
		},

		// America/New_York: 2027-03-14 02:00 EST → 03:00 EDT; 2027-11-07
		// 02:00 EDT → 01:00 EST.
		"NewYork/GapFixedRunsAnHourLater": {
			zone: "America/New_York", expr: "30 2 * * *", from: "2027-03-13 00:00 -05:00",
			want: []string{"2027-03-13 02:30 -05:00", "2027-03-14 03:30 -04:00", "2027-03-15 02:30 -04:00"},
		},
		"NewYork/RepeatFixedRunsAtTheFirst": {
			zone: "America/New_York", expr: "30 1 * * *", from: "2027-11-06 00:00 -04:00",
			want: []string{"2027-11-06 01:30 -04:00", "2027-11-07 01:30 -04:00", "2027-11-08 01:30 -05:00"},
		},
		"NewYork/Every15Spring": {
			zone: "America/New_York", expr: "*/15 * * * *", from: "2027-03-14 01:30 -05:00",
			want: []string{"2027-03-14 01:45 -05:00", "2027-03-14 03:00 -04:00", "2027-03-14 03:15 -04:00"},
		},
		"NewYork/Every15Fall": {
			zone: "America/New_York", expr: "*/15 * * * *", from: "2027-11-07 01:30 -04:00",
			want: []string{"2027-11-07 01:45 -04:00", "2027-11-07 01:00 -05:00", "2027-11-07 01:15 -05:00", "2027-11-07 01:30 -05:00", "2027-11-07 01:45 -05:00", "2027-11-07 02:00 -05:00"},
		},
		"NewYork/HourlySpring": {
			zone: "America/New_York", expr: "0 * * * *", from: "2027-03-14 00:30 -05:00",
			want: []string{"2027-03-14 01:00 -05:00", "2027-03-14 03:00 -04:00", "2027-03-14 04:00 -04:00"},
		},
		"NewYork/HourlyFall": {
			zone: "America/New_York", expr: "0 * * * *", from: "2027-11-07 00:30 -04:00",
			want: []string{"2027-11-07 01:00 -04:00", "2027-11-07 01:00 -05:00", "2027-11-07 02:00 -05:00"},
		},
		"NewYork/FixedOutside": {
			zone: "America/New_York", expr: "0 2,12 * * *", from: "2027-11-06 13:00 -04:00",
			want: []string{"2027-11-07 02:00 -05:00", "2027-11-07 12:00 -05:00", "2027-11-08 02:00 -05:00"},
		},

		// Australia/Sydney: 2027-04-04 03:00 AEDT → 02:00 AEST;
		// 2027-10-03 02:00 AEST → 03:00 AEDT.
		"Sydney/GapFixedRunsAnHourLater": {
			zone: "Australia/Sydney", expr: "30 2 * * *", from: "2027-10-02 00:00 +10:00",
			want: []string{"2027-10-02 02:30 +10:00", "2027-10-03 03:30 +11:00", "2027-10-04 02:30 +11:00"},
		},
		"Sydney/RepeatFixedRunsAtTheFirst": {
			zone: "Australia/Sydney", expr: "30 2 * * *", from: "2027-04-03 00:00 +11:00",
			want: []string{"2027-04-03 02:30 +11:00", "2027-04-04 02:30 +11:00", "2027-04-05 02:30 +10:00"},
		},
		"Sydney/Every15Spring": {
			zone: "Australia/Sydney", expr: "*/15 * * * *", from: "2027-10-03 01:30 +10:00",
			want: []string{"2027-10-03 01:45 +10:00", "2027-10-03 03:00 +11:00", "2027-10-03 03:15 +11:00"},
		},
		"Sydney/Every15Fall": {
			zone: "Australia/Sydney", expr: "*/15 * * * *", from: "2027-04-04 02:30 +11:00",
			want: []string{"2027-04-04 02:45 +11:00", "2027-04-04 02:00 +10:00", "2027-04-04 02:15 +10:00", "2027-04-04 02:30 +10:00", "2027-04-04 02:45 +10:00", "2027-04-04 03:00 +10:00"},
		},
		"Sydney/HourlySpring": {
			zone: "Australia/Sydney", expr: "0 * * * *", from: "2027-10-03 00:30 +10:00",
			want: []string{"2027-10-03 01:00 +10:00", "2027-10-03 03:00 +11:00", "2027-10-03 04:00 +11:00"},
		},
		"Sydney/HourlyFall": {
			zone: "Australia/Sydney", expr: "0 * * * *", from: "2027-04-04 01:30 +11:00",
			want: []string{"2027-04-04 02:00 +11:00", "2027-04-04 02:00 +10:00", "2027-04-04 03:00 +10:00"},
		},
		"Sydney/FixedOutside": {
			zone: "Australia/Sydney", expr: "0 6 * * *", from: "2027-10-02 07:00 +10:00",
			want: []string{"2027-10-03 06:00 +11:00", "2027-10-04 06:00 +11:00"},
		},

		// America/Santiago: Saturday 2027-04-03 24:00 -03 → 23:00 -04;
		// Saturday 2027-09-04 24:00 -04 → Sunday 01:00 -03.
		"Santiago/GapFixedRunsAnHourLater": {
			zone: "America/Santiago", expr: "30 0 * * *", from: "2027-09-04 00:00 -04:00",
			want: []string{"2027-09-04 00:30 -04:00", "2027-09-05 01:30 -03:00", "2027-09-06 00:30 -03:00"},
		},
		"Santiago/DailyAtMidnightRunsAt1": {
			zone: "America/Santiago", expr: "@daily", from: "2027-09-04 12:00 -04:00",
			want: []string{"2027-09-05 01:00 -03:00", "2027-09-06 00:00 -03:00"},
		},
		"Santiago/RepeatFixedRunsAtTheFirst": {
			zone: "America/Santiago", expr: "30 23 * * *", from: "2027-04-02 12:00 -03:00",
			want: []string{"2027-04-02 23:30 -03:00", "2027-04-03 23:30 -03:00", "2027-04-04 23:30 -04:00"},
		},
		"Santiago/Every15Spring": {
			zone: "America/Santiago", expr: "*/15 * * * *", from: "2027-09-04 23:30 -04:00",
			want: []string{"2027-09-04 23:45 -04:00", "2027-09-05 01:00 -03:00", "2027-09-05 01:15 -03:00"},
		},
		"Santiago/Every15Fall": {
			zone: "America/Santiago", expr: "*/15 * * * *", from: "2027-04-03 23:30 -03:00",
			want: []string{"2027-04-03 23:45 -03:00", "2027-04-03 23:00 -04:00", "2027-04-03 23:15 -04:00", "2027-04-03 23:30 -04:00", "2027-04-03 23:45 -04:00", "2027-04-04 00:00 -04:00"},
		},
		"Santiago/HourlySpring": {
			zone: "America/Santiago", expr: "0 * * * *", from: "2027-09-04 22:30 -04:00",
			want: []string{"2027-09-04 23:00 -04:00", "2027-09-05 01:00 -03:00", "2027-09-05 02:00 -03:00"},
		},
		"Santiago/HourlyFall": {
			zone: "America/Santiago", expr: "0 * * * *", from: "2027-04-03 22:30 -03:00",
			want: []string{"2027-04-03 23:00 -03:00", "2027-04-03 23:00 -04:00", "2027-04-04 00:00 -04:00"},
		},
		"Santiago/FixedOutside": {
			zone: "America/Santiago", expr: "0 12 * * *", from: "2027-09-04 13:00 -04:00",
			want: []string{"2027-09-05 12:00 -03:00", "2027-09-06 12:00 -03:00"},
		},

		// Australia/Lord_Howe, a 30-minute shift: 2027-04-04 02:00 +11 →
		// 01:30 +10:30; 2027-10-03 02:00 +10:30 → 02:30 +11.
		"LordHowe/GapFixedRunsHalfAnHourLater": {
			zone: "Australia/Lord_Howe", expr: "15 2 * * *", from: "2027-10-02 12:00 +10:30",
			want: []string{"2027-10-03 02:45 +11:00", "2027-10-04 02:15 +11:00"},
		},
		"LordHowe/GapFixedCoincidingRunsOnce": {
			zone: "Australia/Lord_Howe", expr: "0,30 2 * * *", from: "2027-10-03 00:00 +10:30",
			want: []string{"2027-10-03 02:30 +11:00", "2027-10-04 02:00 +11:00", "2027-10-04 02:30 +11:00"},
		},
		"LordHowe/RepeatFixedRunsAtTheFirst": {
			zone: "Australia/Lord_Howe", expr: "45 1 * * *", from: "2027-04-03 12:00 +11:00",
			want: []string{"2027-04-04 01:45 +11:00", "2027-04-05 01:45 +10:30"},
		},
		"LordHowe/Every15Spring": {
			zone: "Australia/Lord_Howe", expr: "*/15 * * * *", from: "2027-10-03 01:30 +10:30",
			want: []string{"2027-10-03 01:45 +10:30", "2027-10-03 02:30 +11:00", "2027-10-03 02:45 +11:00"},
		},
		"LordHowe/Every15Fall": {
			zone: "Australia/Lord_Howe", expr: "*/15 * * * *", from: "2027-04-04 01:20 +11:00",
			want: []string{"2027-04-04 01:30 +11:00", "2027-04-04 01:45 +11:00", "2027-04-04 01:30 +10:30", "2027-04-04 01:45 +10:30", "2027-04-04 02:00 +10:30"},
		},
		"LordHowe/HourlySpring": {
			zone: "Australia/Lord_Howe", expr: "0 * * * *", from: "2027-10-03 00:30 +10:30",
			want: []string{"2027-10-03 01:00 +10:30", "2027-10-03 03:00 +11:00"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			from, err := time.Parse(zoneLayout, tc.from)
			require.NoError(t, err)
			c := parseCron(t, tc.expr, tc.zone)
			require.Equal(t, tc.want, nextN(t, c, from, len(tc.want), zoneLayout))
		})
	}
}

func TestCron_Interval(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		expr, zone string
		want       time.Duration
	}{
		"EveryMinute":          {"* * * * *", "", time.Minute},
		"Every15m":             {"*/15 * * * *", "", 15 * time.Minute},
		"Every15mMadrid":       {"*/15 * * * *", "Europe/Madrid", 15 * time.Minute},
		"UnevenMinutes":        {"0,10,45 * * * *", "", 10 * time.Minute},
		"Hourly":               {"@hourly", "", time.Hour},
		"HourlyMadrid":         {"0 * * * *", "Europe/Madrid", time.Hour},
		"Daily":                {"0 6 * * *", "", 24 * time.Hour},
		"WeekdaysShortestGap":  {"0 6 * * 1-5", "", 24 * time.Hour},
		"TwiceADay":            {"0 6,18 * * *", "", 12 * time.Hour},
		"Weekly":               {"0 9 * * mon", "", 7 * 24 * time.Hour},
		"TwiceAMonth":          {"0 9 1,15 * *", "", 14 * 24 * time.Hour},
		"MonthlyShortestIsFeb": {"@monthly", "", 28 * 24 * time.Hour},
		"Yearly":               {"@yearly", "", 365 * 24 * time.Hour},
		"LeapDay":              {"0 0 29 2 *", "", 1461 * 24 * time.Hour},           // 2004 to 2008
		"LeapDayOnASunday":     {"0 0 29 2 */7", "", (28*365 + 7) * 24 * time.Hour}, // 2004 to 2032
		// DST shortens it: the spring-forward day is 23 hours long.
		"DailyMadridSpring":   {"30 2 * * *", "Europe/Madrid", 23 * time.Hour},
		"DailySixMadrid":      {"0 6 * * *", "Europe/Madrid", 23 * time.Hour},
		"DailyLordHowe":       {"0 6 * * *", "Australia/Lord_Howe", 23*time.Hour + 30*time.Minute},
		"DailyUTCZoneNoShift": {"0 6 * * *", "Asia/Tokyo", 24 * time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, parseCron(t, tc.expr, tc.zone).Interval())
		})
	}
}

func TestCron_String(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		expr, zone string
		want       string
		wantZone   string
	}{
		"UTCByDefault":     {"0 6 * * *", "", "cron 0 6 * * *", "UTC"},
		"UTCNamed":         {"0 6 * * *", "UTC", "cron 0 6 * * *", "UTC"},
		"Zone":             {"0 6 * * *", "Europe/Madrid", "cron 0 6 * * * Europe/Madrid", "Europe/Madrid"},
		"AsWritten":        {"0 6 * * MON-fri", "America/New_York", "cron 0 6 * * MON-fri America/New_York", "America/New_York"},
		"WhitespaceNormal": {"  0\t6 *  * *\n", "", "cron 0 6 * * *", "UTC"},
		"AtForm":           {"@daily", "Australia/Sydney", "cron @daily Australia/Sydney", "Australia/Sydney"},
		"AtFormAsWritten":  {" @Weekly ", "", "cron @Weekly", "UTC"},
		"EtcUTCIsNamed":    {"*/5 * * * *", "Etc/UTC", "cron */5 * * * * Etc/UTC", "Etc/UTC"},
		"ListsRangesSteps": {"0-10/5,30 */2 1,15 jan-jun 1-5", "", "cron 0-10/5,30 */2 1,15 jan-jun 1-5", "UTC"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := parseCron(t, tc.expr, tc.zone)
			require.Equal(t, tc.want, c.String())
			require.Equal(t, tc.wantZone, c.Zone())
		})
	}
}

func TestParseCron(t *testing.T) {
	t.Parallel()

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct {
			expr, want string
		}{
			"MinuteOutOfRange":         {"61 * * * *", `cron "61 * * * *": minute field: 61 is out of range 0-59`},
			"MinuteOutOfRangeInList":   {"0,60 * * * *", `cron "0,60 * * * *": minute field: 60 is out of range 0-59`},
			"HourOutOfRange":           {"0 24 * * *", `cron "0 24 * * *": hour field: 24 is out of range 0-23`},
			"HourOutOfRangeInRange":    {"0 20-25 * * *", `cron "0 20-25 * * *": hour field: 25 is out of range 0-23`},
			"DayOfMonthZero":           {"0 0 0 * *", `cron "0 0 0 * *": day-of-month field: 0 is out of range 1-31`},
			"DayOfMonth32":             {"0 0 32 * *", `cron "0 0 32 * *": day-of-month field: 32 is out of range 1-31`},
			"MonthZero":                {"0 0 1 0 *", `cron "0 0 1 0 *": month field: 0 is out of range 1-12`},
			"Month13":                  {"0 0 1 13 *", `cron "0 0 1 13 *": month field: 13 is out of range 1-12`},
			"DayOfWeek8":               {"0 0 * * 8", `cron "0 0 * * 8": day-of-week field: 8 is out of range 0-7`},
			"HugeNumber":               {"99999999999999999999 * * * *", `cron "99999999999999999999 * * * *": minute field: 99999999999999999999 is out of range 0-59`},
			"BadMonthName":             {"0 0 1 jan-foo *", `cron "0 0 1 jan-foo *": month field: "foo" is not a number or a month name (jan-dec)`},
			"FullMonthName":            {"0 0 1 january *", `cron "0 0 1 january *": month field: "january" is not a number or a month name (jan-dec)`},
			"BadDayName":               {"0 0 * * funday", `cron "0 0 * * funday": day-of-week field: "funday" is not a number or a day name (sun-sat)`},
			"ShortDayName":             {"0 0 * * mo", `cron "0 0 * * mo": day-of-week field: "mo" is not a number or a day name (sun-sat)`},
			"DayNameInMonthField":      {"0 0 1 mon *", `cron "0 0 1 mon *": month field: "mon" is not a number or a month name (jan-dec)`},
			"NameInMinuteField":        {"jan * * * *", `cron "jan * * * *": minute field: "jan" is not a number`},
			"NameInDayOfMonthField":    {"0 0 mon * *", `cron "0 0 mon * *": day-of-month field: "mon" is not a number`},
			"NotANumber":               {"0 x * * *", `cron "0 x * * *": hour field: "x" is not a number`},
			"Decimal":                  {"1.5 * * * *", `cron "1.5 * * * *": minute field: "1.5" is not a number`},
			"QuestionMark":             {"0 0 ? * mon", `cron "0 0 ? * mon": day-of-month field: "?" is not a number`},
			"StepZero":                 {"*/0 * * * *", `cron "*/0 * * * *": minute field: "*/0": step 0 is out of range 1-59`},
			"StepTooLarge":             {"0 */24 * * *", `cron "0 */24 * * *": hour field: "*/24": step 24 is out of range 1-23`},
			"StepEmpty":                {"*/ * * * *", `cron "*/ * * * *": minute field: "*/": empty step`},
			"StepNotANumber":           {"0 0 */x * *", `cron "0 0 */x * *": day-of-month field: "*/x": step "x" is not a number`},
			"StepNegative":             {"0 0 * */-1 *", `cron "0 0 * */-1 *": month field: "*/-1": step "-1" is not a number`},
			"TwoSteps":                 {"*/2/3 * * * *", `cron "*/2/3 * * * *": minute field: "*/2/3": more than one step`},
			"NothingBeforeStep":        {"0 0 * * /2", `cron "0 0 * * /2": day-of-week field: "/2": nothing before the step`},
			"ReversedRange":            {"5-1 * * * *", `cron "5-1 * * * *": minute field: range 5-1 is reversed (want low-high)`},
			"ReversedDayRange":         {"0 0 * * 5-0", `cron "0 0 * * 5-0": day-of-week field: range 5-0 is reversed (want low-high)`},
			"ReversedNamedRange":       {"0 0 1 dec-jan *", `cron "0 0 1 dec-jan *": month field: range dec-jan is reversed (want low-high)`},
			"RangeMissingHigh":         {"0 0 * * mon-", `cron "0 0 * * mon-": day-of-week field: range "mon-" is missing a bound`},
			"NegativeNumber":           {"-1 * * * *", `cron "-1 * * * *": minute field: range "-1" is missing a bound`},
			"ThreePartRange":           {"1-2-3 * * * *", `cron "1-2-3 * * * *": minute field: "1-2-3" is not a range (want N-M)`},
			"TrailingComma":            {"1,2, * * * *", `cron "1,2, * * * *": minute field: empty item in list "1,2,"`},
			"LeadingComma":             {"0 ,1 * * *", `cron "0 ,1 * * *": hour field: empty item in list ",1"`},
			"DoubleComma":              {"0 0 1,,2 * *", `cron "0 0 1,,2 * *": day-of-month field: empty item in list "1,,2"`},
			"FourFields":               {"* * * *", `cron "* * * *": want 5 fields (minute hour day-of-month month day-of-week) or an @ form, got 4`},
			"SixFieldsNoSeconds":       {"0 * * * * *", `cron "0 * * * * *": want 5 fields (minute hour day-of-month month day-of-week) or an @ form, got 6`},
			"Empty":                    {"", `cron "": want 5 fields (minute hour day-of-month month day-of-week) or an @ form, got 0`},
			"Blank":                    {" \t ", `cron "": want 5 fields (minute hour day-of-month month day-of-week) or an @ form, got 0`},
			"UnknownAtForm":            {"@fortnightly", `cron "@fortnightly": unknown @ form (want @hourly, @daily, @midnight, @weekly, @monthly, @yearly or @annually)`},
			"Reboot":                   {"@reboot", `cron "@reboot": unknown @ form`},
			"AtFormWithMore":           {"@daily 5", `cron "@daily 5": unknown @ form`},
			"NeverFiresFeb31":          {"0 0 31 2 *", `cron "0 0 31 2 *": never fires`},
			"NeverFiresFeb30":          {"0 0 30 feb *", `cron "0 0 30 feb *": never fires`},
			"NeverFiresApr31":          {"0 0 31 4 *", `cron "0 0 31 4 *": never fires`},
			"NeverFiresShortMonths31":  {"0 0 31 apr,jun,sep,nov *", `cron "0 0 31 apr,jun,sep,nov *": never fires`},
			"NeverFiresStarredWeekday": {"0 0 30,31 2 */2", `cron "0 0 30,31 2 */2": never fires`},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				c, err := periodic.ParseCron(tc.expr, "")
				require.Nil(t, c)
				require.Error(t, err)
				require.Contains(t, err.Error(), tc.want)
				require.NotContains(t, err.Error(), "\n")
			})
		}
	})

	t.Run("Zones", func(t *testing.T) {
		t.Parallel()
		for zone, want := range map[string]string{
			"Mars/Olympus":     `cron zone "Mars/Olympus": unknown time zone`,
			"Europe/Madird":    `cron zone "Europe/Madird": unknown time zone`,
			" Europe/Madrid":   `cron zone " Europe/Madrid": unknown time zone`,
			"../../etc/passwd": `cron zone "../../etc/passwd": unknown time zone`,
			"Local":            `cron zone "Local": want an IANA name such as Europe/Madrid`,
		} {
			t.Run(zone, func(t *testing.T) {
				t.Parallel()
				c, err := periodic.ParseCron("0 6 * * *", zone)
				require.Nil(t, c)
				require.EqualError(t, err, want)
			})
		}
	})

	t.Run("ExpressionErrorBeforeZoneError", func(t *testing.T) {
		t.Parallel()
		_, err := periodic.ParseCron("61 * * * *", "Mars/Olympus")
		require.EqualError(t, err, `cron "61 * * * *": minute field: 61 is out of range 0-59`)
	})

	t.Run("AcceptsRareButPossible", func(t *testing.T) {
		t.Parallel()
		// A check over a few years would reject these; each fires, if
		// rarely (Feb 1 on a Monday: 2027, then 2038).
		for _, expr := range []string{"0 0 29 2 */7", "0 0 */31 2 mon", "0 0 31 12 */7", "0 0 29 2 1"} {
			_, err := periodic.ParseCron(expr, "")
			require.NoError(t, err, expr)
		}
		c := parseCron(t, "0 0 */31 2 mon", "")
		require.Equal(t, []string{"2027-02-01 00:00 Mon", "2038-02-01 00:00 Mon"}, nextN(t, c, utc(t, "2027-01-01 00:00:00"), 2, utcLayout))
	})

	t.Run("SameSetsAsTheirExpansion", func(t *testing.T) {
		t.Parallel()
		// Equivalent spellings fire at the same times.
		from := utc(t, "2027-01-01 00:00:00")
		for _, group := range [][]string{
			{"@hourly", "0 * * * *", "0 */1 * * *", "0 0-23 * * *"},
			{"@daily", "@midnight", "0 0 * * *", "0 0 1-31 * *", "0 0 * 1-12 *", "0 0 * jan-dec *", "0 0 * * 0-6", "0 0 * * 0-7", "0 0 * * sun-sat"},
			{"@weekly", "0 0 * * 0", "0 0 * * 7", "0 0 * * sun", "0 0 * * SUN", "0 0 * * 0,7"},
			{"@monthly", "0 0 1 * *"},
			{"@yearly", "@annually", "0 0 1 1 *", "0 0 1 jan *"},
			{"0 8 * * 5-7", "0 8 * * fri-sun", "0 8 * * fri,sat,sun", "0 8 * * 5/1", "0 8 * * 0,5,6"},
			{"0 8 * * 1-5", "0 8 * * mon-fri", "0 8 * * Mon-Fri", "0 8 * * 1,2,3,4,5", "0 8 * * 1-5/1"},
			{"*/20 * * * *", "0,20,40 * * * *", "0-59/20 * * * *", "0/20 * * * *"},
		} {
			want := nextN(t, parseCron(t, group[0], ""), from, 30, utcLayout)
			for _, expr := range group[1:] {
				require.Equal(t, want, nextN(t, parseCron(t, expr, ""), from, 30, utcLayout), "%q vs %q", expr, group[0])
			}
		}
	})
}
