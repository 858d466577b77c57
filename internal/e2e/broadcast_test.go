package e2e_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// broadcastLine is one line of `enqueue broadcast subscribe --json`.
type broadcastLine struct {
	Gap         bool            `json:"gap"`
	Channel     string          `json:"channel"`
	Data        json.RawMessage `json:"data"`
	PublishedAt string          `json:"published_at"`
}

func broadcastKey(t *testing.T) string {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return base64.StdEncoding.EncodeToString(k)
}

// waitBroadcast waits until p's stdout holds lines for which match is
// true, and returns those lines.
func waitBroadcast(t *testing.T, p *proctest.Proc, what string, match func([]broadcastLine) bool) []broadcastLine {
	t.Helper()
	var ls []broadcastLine
	_, err := p.WaitForLineFunc(startTimeout, func(line string) bool {
		// Every line so far is seen once per wait, stdout's and stderr's
		// (JSON logs, which have a msg).
		var bl struct {
			broadcastLine
			Msg string `json:"msg"`
		}
		if json.Unmarshal([]byte(line), &bl) == nil && bl.Msg == "" && bl.Channel != "" {
			ls = append(ls, bl.broadcastLine)
		}
		return match(ls)
	})
	require.NoError(t, err, "waiting for %s; stdout:\n%s\nstderr:\n%s", what, p.Stdout(), p.Stderr())
	return ls
}

func hasData(channel, data string) func([]broadcastLine) bool {
	return func(ls []broadcastLine) bool {
		for _, l := range ls {
			if !l.Gap && l.Channel == channel && string(l.Data) == data {
				return true
			}
		}
		return false
	}
}

func gaps(ls []broadcastLine, channel string) int {
	n := 0
	for _, l := range ls {
		if l.Gap && l.Channel == channel {
			n++
		}
	}
	return n
}

func TestBroadcast_CLI(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()
	key := "FERRY_BROADCAST_KEYS=" + broadcastKey(t)
	b := bins(t)

	subscribe := func() *proctest.Proc {
		p := proctest.Start(t, b.enqueue, env(url, key), "broadcast", "subscribe", "cli.a", "cli.b", "--json")
		_, err := p.WaitForLine(startTimeout, "broadcast: subscribed to [cli.a cli.b]")
		require.NoError(t, err)
		return p
	}
	publish := func(extra []string, channel, data string) (string, string, int) {
		return proctest.Run(t, b.enqueue, env(url, extra...), nil, "broadcast", "publish", channel, "--data", data)
	}
	s1, s2 := subscribe(), subscribe()

	_, stderr, code := publish([]string{key}, "cli.a", `{"n": 1}`)
	require.Zero(t, code, stderr)
	large := `"` + strings.Repeat("x", 20_000) + `"`
	_, stderr, code = publish([]string{key}, "cli.b", large)
	require.Zero(t, code, stderr)
	for _, s := range []*proctest.Proc{s1, s2} {
		ls := waitBroadcast(t, s, "the large message", hasData("cli.b", large))
		require.Len(t, ls, 2)
		require.Equal(t, "cli.a", ls[0].Channel)
		require.JSONEq(t, `{"n":1}`, string(ls[0].Data), "one JSON line per message, data as published")
		require.NotEmpty(t, ls[0].PublishedAt)
	}

	// Forged (another key) and unsigned messages are never printed; bad
	// input exits 2 with one line, and publishes nothing.
	_, _, code = publish([]string{"FERRY_BROADCAST_KEYS=" + broadcastKey(t)}, "cli.a", `"forged"`)
	require.Zero(t, code)
	_, _, code = publish(nil, "cli.a", `"unsigned"`)
	require.Zero(t, code)
	for _, bad := range [][]string{
		{"broadcast", "publish", "cli a", "--data", "1"},
		{"broadcast", "publish", "cli.a", "--data", "{not json"},
		{"broadcast", "publish", "cli.a", "--data", `"` + strings.Repeat("x", 64<<10) + `"`},
		{"broadcast", "publish", "cli.a"},
		{"broadcast", "subscribe"},
		{"broadcast", "subscribe", "cli/a"},
	} {
		stdout, stderr, code := proctest.Run(t, b.enqueue, env(url, key), nil, bad...)
		require.Equal(t, 2, code, "%v: %s", bad, stderr)
		require.Empty(t, stdout)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
	}
	_, stderr, code = proctest.Run(t, b.enqueue, env(url, "FERRY_BROADCAST_KEYS=c2hvcnQ="), nil, "broadcast", "publish", "cli.a", "--data", "1")
	require.Equal(t, 2, code)
	require.NotContains(t, stderr, "c2hvcnQ", "a key never shows in an error")
	_, stderr, code = publish([]string{key}, "cli.a", `"fence"`)
	require.Zero(t, code, stderr)
	ls := waitBroadcast(t, s1, "the fence", hasData("cli.a", `"fence"`))
	require.Len(t, ls, 3, "nothing forged, unsigned or bad came before the fence: %v", ls)

	// Each killed LISTEN session of s1 is a gap on each of its channels:
	// 100 % of the injected drops. s2's session is never touched: no gap.
	for round := 1; round <= 3; round++ {
		var killed int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'ferry-broadcast:%:' || $1::text`, fmt.Sprint(s1.Pid())).Scan(&killed))
		require.Equal(t, 1, killed, "s1 has one LISTEN session")
		waitBroadcast(t, s1, fmt.Sprintf("gap %d", round), func(ls []broadcastLine) bool {
			return gaps(ls, "cli.a") == round && gaps(ls, "cli.b") == round
		})
		// Messages flow again after the gap.
		data := fmt.Sprintf(`{"after_gap":%d}`, round)
		_, stderr, code = publish([]string{key}, "cli.a", data)
		require.Zero(t, code, stderr)
		waitBroadcast(t, s1, "a message after the gap", hasData("cli.a", data))
	}
	ls = waitBroadcast(t, s2, "the last message", hasData("cli.a", `{"after_gap":3}`))
	require.Zero(t, gaps(ls, "cli.a")+gaps(ls, "cli.b"))
	require.Equal(t, 3, strings.Count(s1.Stdout(), `{"gap":true,"channel":"cli.a"}`+"\n"), "a gap is the line {\"gap\":true,\"channel\":…}")

	// Interrupted, subscribe exits 0.
	require.NoError(t, s2.Signal(syscall.SIGINT))
	code, err := s2.Wait(stopTimeout)
	require.NoError(t, err)
	require.Zero(t, code)
}
