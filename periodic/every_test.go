package periodic_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/periodic"
)

// utc parses "2006-01-02 15:04:05.999999999" in UTC.
func utc(t *testing.T, s string) time.Time {
	t.Helper()
	tm, err := time.Parse("2006-01-02 15:04:05.999999999", s)
	require.NoError(t, err)
	return tm
}

func TestEvery_Next(t *testing.T) {
	t.Parallel()

	madrid, err := time.LoadLocation("Europe/Madrid")
	require.NoError(t, err)

	for name, tc := range map[string]struct {
		d    time.Duration
		from time.Time
		want []string // the next fire times, in UTC
	}{
		"5mAlignedToTheHour": {
			d: 5 * time.Minute, from: utc(t, "2027-03-14 09:58:12"),
			want: []string{"2027-03-14 10:00:00", "2027-03-14 10:05:00", "2027-03-14 10:10:00"},
		},
		"ExactTickGivesTheNextOne": {
			d: 5 * time.Minute, from: utc(t, "2027-03-14 10:00:00"),
			want: []string{"2027-03-14 10:05:00", "2027-03-14 10:10:00"},
		},
		"JustBeforeATick": {
			d: 5 * time.Minute, from: utc(t, "2027-03-14 10:04:59.999999999"),
			want: []string{"2027-03-14 10:05:00"},
		},
		"1h": {
			d: time.Hour, from: utc(t, "2027-12-31 23:00:00.5"),
			want: []string{"2028-01-01 00:00:00", "2028-01-01 01:00:00"},
		},
		"7s": {
			// 2027-01-01 00:00:00 is 1798761600s after the epoch, 6s past
			// a multiple of 7.
			d: 7 * time.Second, from: utc(t, "2027-01-01 00:00:00"),
			want: []string{"2027-01-01 00:00:01", "2027-01-01 00:00:08", "2027-01-01 00:00:15"},
		},
		"7mRunsAcrossTheHour": {
			// 2027-01-01 00:00 is 29979360 minutes after the epoch, 5 past
			// a multiple of 7: ticks at 00:02, 00:09 … 00:58, then 01:05.
			d: 7 * time.Minute, from: utc(t, "2027-01-01 00:52:00"),
			want: []string{"2027-01-01 00:58:00", "2027-01-01 01:05:00", "2027-01-01 01:12:00"},
		},
		"24hAtUTCMidnight": {
			d: 24 * time.Hour, from: utc(t, "2027-06-15 13:00:00"),
			want: []string{"2027-06-16 00:00:00", "2027-06-17 00:00:00"},
		},
		"LocationOfTIsIgnored": {
			d: time.Hour, from: time.Date(2027, 3, 28, 1, 59, 0, 0, madrid), // 00:59 UTC
			want: []string{"2027-03-28 01:00:00", "2027-03-28 02:00:00"},
		},
		"AtTheEpoch": {
			d: time.Hour, from: utc(t, "1970-01-01 00:00:00"),
			want: []string{"1970-01-01 01:00:00"},
		},
		"Before1970": {
			d: 7 * time.Minute, from: utc(t, "1969-12-31 23:50:00"),
			want: []string{"1969-12-31 23:53:00", "1970-01-01 00:00:00", "1970-01-01 00:07:00"},
		},
		"Before1678": {
			// Outside UnixNano's range: the arbitrary-precision path.
			d: 5 * time.Minute, from: utc(t, "1600-02-29 11:59:59"),
			want: []string{"1600-02-29 12:00:00", "1600-02-29 12:05:00"},
		},
		"After2262": {
			d: 7 * time.Minute, from: utc(t, "2300-01-01 00:00:00"),
			want: []string{"2300-01-01 00:01:00", "2300-01-01 00:08:00"},
		},
		"SubSecond": {
			d: 250 * time.Millisecond, from: utc(t, "2027-01-01 00:00:00.3"),
			want: []string{"2027-01-01 00:00:00.5", "2027-01-01 00:00:00.75", "2027-01-01 00:00:01"},
		},
		"LongerThanNanosecondsFitComfortably": {
			// 100 years: the arbitrary-precision path for a huge d.
			d: 100 * 365 * 24 * time.Hour, from: utc(t, "2027-01-01 00:00:00"),
			want: []string{"2069-12-07 00:00:00", "2169-11-13 00:00:00"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tr := periodic.Every(tc.d)
			got := make([]string, 0, len(tc.want))
			at := tc.from
			for range tc.want {
				next := tr.Next(at)
				require.True(t, next.After(at), "Next(%v) = %v, not after", at, next)
				require.Equal(t, time.UTC, next.Location())
				got = append(got, next.Format("2006-01-02 15:04:05.999999999"))
				at = next
			}
			require.Equal(t, tc.want, got)
		})
	}

	t.Run("SameTickFromAnyPointInThePeriod", func(t *testing.T) {
		t.Parallel()
		tr := periodic.Every(5 * time.Minute)
		want := utc(t, "2027-03-14 10:05:00")
		for at := utc(t, "2027-03-14 10:00:00"); at.Before(want); at = at.Add(7 * time.Second) {
			require.Equal(t, want, tr.Next(at), "from %v", at)
		}
	})

	t.Run("ExtremeTimes", func(t *testing.T) {
		t.Parallel()
		tr := periodic.Every(time.Hour)
		require.Equal(t, time.Date(1, 1, 1, 1, 0, 0, 0, time.UTC), tr.Next(time.Time{}))
		require.Equal(t, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), tr.Next(time.Date(9999, 12, 31, 23, 0, 0, 0, time.UTC)))
	})

	t.Run("PanicsBelow100ms", func(t *testing.T) {
		t.Parallel()
		require.PanicsWithValue(t, "periodic: Every(50ms): the interval must be at least 100ms", func() { periodic.Every(50 * time.Millisecond) })
		require.Panics(t, func() { periodic.Every(0) })
		require.Panics(t, func() { periodic.Every(-time.Minute) })
		require.NotPanics(t, func() { periodic.Every(100 * time.Millisecond) })
	})
}

func TestEvery_String(t *testing.T) {
	t.Parallel()

	for want, d := range map[string]time.Duration{
		"every 5m":       5 * time.Minute,
		"every 1h":       time.Hour,
		"every 1h30m":    90 * time.Minute,
		"every 1h0m5s":   time.Hour + 5*time.Second,
		"every 10s":      10 * time.Second,
		"every 1m30s":    90 * time.Second,
		"every 24h":      24 * time.Hour,
		"every 1.5s":     1500 * time.Millisecond,
		"every 100ms":    100 * time.Millisecond,
		"every 8784h":    366 * 24 * time.Hour,
		"every 26h3m":    26*time.Hour + 3*time.Minute,
		"every 2h0m0.5s": 2*time.Hour + 500*time.Millisecond,
	} {
		t.Run(want, func(t *testing.T) {
			t.Parallel()
			tr := periodic.Every(d)
			require.Equal(t, want, tr.String())
			require.Equal(t, "UTC", tr.Zone())
			require.Equal(t, d, tr.Interval())

			// The text reads back as the same trigger.
			back, err := periodic.ParseEvery(want[len("every "):])
			if d >= time.Second {
				require.NoError(t, err)
				require.Equal(t, tr, back)
			}
		})
	}
}

func TestParseEvery(t *testing.T) {
	t.Parallel()

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		for s, want := range map[string]time.Duration{
			"15m":    15 * time.Minute,
			"1h30m":  90 * time.Minute,
			"10s":    10 * time.Second,
			"1s":     time.Second,
			" 5m ":   5 * time.Minute,
			"8784h":  366 * 24 * time.Hour,
			"1.5h":   90 * time.Minute,
			"90m":    90 * time.Minute,
			"3600s":  time.Hour,
			"1h0m0s": time.Hour,
		} {
			t.Run(s, func(t *testing.T) {
				t.Parallel()
				tr, err := periodic.ParseEvery(s)
				require.NoError(t, err)
				require.Equal(t, want, tr.Interval())
				require.Equal(t, periodic.Every(want), tr)
			})
		}
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		for s, want := range map[string]string{
			"":       `every "": not a duration (want e.g. 10s, 15m, 1h30m)`,
			"5":      `every "5": not a duration`,
			"5 min":  `every "5 min": not a duration`,
			"1d":     `every "1d": not a duration`,
			"soon":   `every "soon": not a duration`,
			"500ms":  `every "500ms": the interval must be at least 1s`,
			"0s":     `every "0s": the interval must be at least 1s`,
			"-5m":    `every "-5m": the interval must be at least 1s`,
			"8785h":  `every "8785h": the interval must be at most 366 days (8784h)`,
			"10000h": `every "10000h": the interval must be at most 366 days`,
		} {
			t.Run(s, func(t *testing.T) {
				t.Parallel()
				tr, err := periodic.ParseEvery(s)
				require.ErrorContains(t, err, want)
				require.Nil(t, tr)
			})
		}
	})
}
