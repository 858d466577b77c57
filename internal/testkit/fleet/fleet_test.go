package fleet_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/fleet"
)

// logLine is a shell command that writes a JSON log record with msg and n to
// stderr, as a worker does.
func logLine(msg, n string) string {
	return `printf '{"time":"2027-01-01T12:00:00.25Z","level":"INFO","msg":"` + msg + `","n":` + n + `}\n' >&2`
}

// newFleet returns a fleet that the test's end kills.
func newFleet(t *testing.T) *fleet.Fleet {
	t.Helper()
	f := fleet.New()
	t.Cleanup(func() { require.NoError(t, f.Kill(10*time.Second)) })
	return f
}

func TestBuilder_Build(t *testing.T) {
	t.Parallel()

	t.Run("BuildsOnce", func(t *testing.T) {
		t.Parallel()
		b := &fleet.Builder{Dir: t.TempDir()}
		const hello = "./internal/testkit/proctest/testdata/hello"
		bins, err := b.Build(hello)
		require.NoError(t, err)
		require.Equal(t, filepath.Join(b.Dir, "hello"), bins[hello])
		require.NoError(t, os.Remove(bins[hello]))
		again, err := b.Build(hello)
		require.NoError(t, err)
		require.Equal(t, bins, again)
		require.NoFileExists(t, again[hello], "not built again")
	})

	t.Run("FailureIsKept", func(t *testing.T) {
		t.Parallel()
		b := &fleet.Builder{Dir: t.TempDir()}
		_, err := b.Build("./no/such/package")
		require.ErrorContains(t, err, "build ./no/such/package: go build")
		_, again := b.Build("./no/such/package")
		require.Equal(t, err, again)
	})
}

func TestFleet_WaitForRecord(t *testing.T) {
	t.Parallel()

	t.Run("FromAnyProcessAfterTheMark", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t)
		a, err := f.Start("sh", nil, "-c", logLine("ready", "1")+"; "+logLine("ready", "2")+"; exec sleep 30")
		require.NoError(t, err)
		rec, err := f.WaitForRecord(nil, 10*time.Second, func(r fleet.Record) bool { return r.Attrs["n"] == json.Number("2") })
		require.NoError(t, err)
		require.Same(t, a, rec.Proc)
		require.Equal(t, "ready", rec.Msg)
		require.Equal(t, "INFO", rec.Level)
		require.Equal(t, time.Date(2027, 1, 1, 12, 0, 0, 250e6, time.UTC), rec.Time)

		m := f.Mark()
		b, err := f.Start("sh", nil, "-c", "sleep 0.2; "+logLine("ready", "3")+"; exec sleep 30")
		require.NoError(t, err)
		rec, err = f.WaitForRecord(m, 10*time.Second, func(r fleet.Record) bool { return r.Msg == "ready" })
		require.NoError(t, err)
		require.Same(t, b, rec.Proc, "a's records are before the mark; b's, started after it, are not")
		_, err = f.WaitForRecord(nil, 0, func(r fleet.Record) bool { return r.Proc == a && r.Attrs["n"] == json.Number("1") })
		require.NoError(t, err, "match sees the record's Proc; a timeout of 0 looks at what is written")
		require.Len(t, f.Live(), 2)
	})

	t.Run("TimesOut", func(t *testing.T) {
		t.Parallel()
		f := newFleet(t)
		_, err := f.Start("sh", nil, "-c", logLine("ready", "1")+"; exec sleep 30")
		require.NoError(t, err)
		_, err = f.WaitForRecord(nil, 10*time.Second, func(r fleet.Record) bool { return r.Msg == "ready" })
		require.NoError(t, err)
		_, err = f.WaitForRecord(f.Mark(), 100*time.Millisecond, func(r fleet.Record) bool { return r.Msg == "ready" })
		require.ErrorContains(t, err, "no such log record in 100ms")
		_, err = f.WaitForRecord(f.Mark(), 0, func(r fleet.Record) bool { return r.Msg == "ready" })
		require.ErrorContains(t, err, "no such log record yet")
	})

	t.Run("KillReapsEveryProcess", func(t *testing.T) {
		t.Parallel()
		f := fleet.New()
		for range 2 {
			_, err := f.Start("sh", nil, "-c", "exec sleep 30")
			require.NoError(t, err)
		}
		require.NoError(t, f.Kill(10*time.Second))
		require.Empty(t, f.Live())
		for _, p := range f.Procs() {
			code, err := p.Wait(0)
			require.NoError(t, err)
			require.Equal(t, 128+int(syscall.SIGKILL), code)
		}
	})
}

func TestParseRecord(t *testing.T) {
	t.Parallel()

	rec, ok := fleet.ParseRecord(`{"time":"2027-01-01T12:00:00Z","level":"WARN","msg":"election: demoted","term":12}`)
	require.True(t, ok)
	require.Equal(t, "election: demoted", rec.Msg)
	require.Equal(t, "WARN", rec.Level)
	require.Equal(t, time.Date(2027, 1, 1, 12, 0, 0, 0, time.UTC), rec.Time)
	require.Equal(t, json.Number("12"), rec.Attrs["term"])

	for _, line := range []string{"", "ferry: started", `{"level":"INFO"}`, `{"msg":`} {
		_, ok := fleet.ParseRecord(line)
		require.False(t, ok, line)
	}
}
