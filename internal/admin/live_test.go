package admin

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/broadcast"
)

// readEvent returns the next server-sent event's name and data.
func readEvent(t *testing.T, r *bufio.Reader) (name, data string) {
	t.Helper()
	for {
		line, err := r.ReadString('\n')
		require.NoError(t, err)
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "" && name != "":
			return name, data
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		}
	}
}

func TestServer_Events(t *testing.T) {
	t.Parallel()
	b, err := broadcast.New(broadcast.Config{QueueSize: 1})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	tb := setup(t, Config{Console: newFakeConsole(), Events: b})

	code, body := get(t, tb.base+"/admin/live.js", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `new EventSource("/admin/events")`)
	_, page := get(t, tb.base+"/admin/", nil)
	require.Contains(t, page, `<script src="/admin/live.js" defer></script>`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tb.base+"/admin/events", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, ": live\n", line, "the stream is open once this arrives")

	require.NoError(t, b.Publish(ctx, EventsChannel, map[string]string{"leader": "acquired"}))
	name, data := readEvent(t, r)
	require.Equal(t, "change", name)
	require.JSONEq(t, `{"leader":"acquired"}`, data)
	require.NoError(t, b.Publish(ctx, "other.channel", 1), "other channels are not streamed")
	require.NoError(t, b.Publish(ctx, EventsChannel, 2))
	name, data = readEvent(t, r)
	require.Equal(t, "change", name)
	require.Equal(t, "2", data)
}

func TestServer_EventsWithoutBroker(t *testing.T) {
	t.Parallel()
	tb := setup(t, Config{Console: newFakeConsole()})
	code, _ := get(t, tb.base+"/admin/events", nil)
	require.Equal(t, http.StatusNoContent, code, "204 tells EventSource not to reconnect")
}
