package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNew(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := New(&buf, "auto", "info")
	require.NoError(t, err)
	l.Info("election: leader acquired", "term", 3)
	l.Debug("hidden")
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), "auto on a non-terminal is JSON: %s", buf.String())
	require.Equal(t, "election: leader acquired", rec["msg"])
	require.EqualValues(t, 3, rec["term"])

	buf.Reset()
	l, err = New(&buf, "text", "debug")
	require.NoError(t, err)
	l.Debug("job: completed", "job_id", 7)
	require.Contains(t, buf.String(), "job: completed")
	require.Contains(t, buf.String(), "job_id=7")
	require.NotContains(t, buf.String(), "\x1b[", "no colour when not a terminal")

	_, err = New(&buf, "xml", "info")
	require.ErrorContains(t, err, `log format "xml"`)
	_, err = New(&buf, "json", "loud")
	require.ErrorContains(t, err, `log level "loud"`)
}

func TestAtLeast(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l, err := New(&buf, "json", "debug")
	require.NoError(t, err)
	river := AtLeast(l, slog.LevelInfo).With("component", "river")
	river.Debug("firehose")
	require.Zero(t, buf.Len())
	river.Info("started")
	require.Contains(t, buf.String(), `"component":"river"`)
}
