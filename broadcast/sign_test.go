package broadcast_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/broadcast"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, 32)
	_, err := rand.Read(k)
	require.NoError(t, err)
	return k
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k1, k2 := newKey(t), newKey(t)
	keys, err := broadcast.ParseKeys(base64.StdEncoding.EncodeToString(k1) + ", " + base64.RawStdEncoding.EncodeToString(k2))
	require.NoError(t, err)
	require.Equal(t, broadcast.Keys{k1, k2}, keys)
	printed := fmt.Sprintf("%v|%s|%+v|%#v|%x|%d", keys, keys, keys, keys, keys, keys)
	require.Equal(t, strings.Repeat("broadcast.Keys(2 keys)|", 5)+"broadcast.Keys(2 keys)", printed, "keys never print their bytes")

	none, err := broadcast.ParseKeys("  ")
	require.NoError(t, err)
	require.Empty(t, none)

	short := base64.StdEncoding.EncodeToString(k1[:31])
	for in, want := range map[string]string{
		short: "key 1 of 1 is 31 bytes, at least 32",
		base64.StdEncoding.EncodeToString(k1) + ",": "key 2 of 2 is empty",
		"not*base64!": "key 1 of 1 is not base64",
	} {
		_, err := broadcast.ParseKeys(in)
		require.ErrorIs(t, err, broadcast.ErrInvalidKeys)
		require.ErrorContains(t, err, want)
		require.NotContains(t, err.Error(), in[:8], "the error never quotes a key")
	}
	_, err = broadcast.New(broadcast.Config{Keys: broadcast.Keys{k1[:16]}})
	require.ErrorIs(t, err, broadcast.ErrInvalidKeys)
}

func TestBroker_Signed(t *testing.T) {
	t.Parallel()
	tb := setup(t, true)
	ctx := context.Background()
	oldKey, newKey, otherKey := newKey(t), newKey(t), newKey(t)

	// The receiver is mid-rotation: it verifies with both keys.
	recv := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: broadcast.Keys{newKey, oldKey}})
	s := subscribe(t, recv, "signed")
	open := newBroker(t, broadcast.Config{Pool: tb.pool})
	subscribe(t, open, "signed")

	signedOld := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: broadcast.Keys{oldKey}})
	signedNew := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: broadcast.Keys{newKey, oldKey}})
	forger := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: broadcast.Keys{otherKey}})
	unsigned := newBroker(t, broadcast.Config{Pool: tb.pool})

	large := strings.Repeat("L", 9000)
	require.NoError(t, signedOld.Publish(ctx, "signed", "old"))
	require.NoError(t, signedNew.Publish(ctx, "signed", "new"))
	require.NoError(t, signedNew.Publish(ctx, "signed", large))
	for range 50 {
		require.NoError(t, forger.Publish(ctx, "signed", "forged"))
		require.NoError(t, forger.Publish(ctx, "signed", large+"forged"))
		require.NoError(t, unsigned.Publish(ctx, "signed", "unsigned"))
	}
	// A signature lifted from a genuine message onto other data or another
	// channel, written by whoever can NOTIFY on the database.
	env := captureEnvelope(t, tb, signedNew, "signed", "genuine")
	for _, tampered := range []string{
		strings.Replace(env, `"genuine"`, `"tampered"`, 1),
		strings.Replace(env, `"c":"signed"`, `"c":"signed2"`, 1),
		strings.Replace(env, `"t":`, `"t":1`, 1),
	} {
		_, err := tb.pool.Exec(ctx, `SELECT pg_notify('ferry_broadcast', $1)`, tampered)
		require.NoError(t, err)
	}
	// ... and a large message's row rewritten before it is read.
	_, err := tb.pool.Exec(ctx, `WITH m AS (INSERT INTO ferry_broadcast_message (channel, data, published_at, signature)
		VALUES ('signed', '"swapped"', to_timestamp(1), 'AAAA') RETURNING id)
		SELECT pg_notify('ferry_broadcast', json_build_object('c', 'signed', 't', 1000000, 's', 'AAAA', 'r', m.id)::text) FROM m`)
	require.NoError(t, err)

	requireMessage(t, s, "signed", `"old"`)
	requireMessage(t, s, "signed", `"new"`)
	requireMessage(t, s, "signed", `"`+large+`"`)
	requireMessage(t, s, "signed", `"genuine"`)
	requireEmpty(t, signedNew, s, "signed")
	d := recv.Dropped()
	require.EqualValues(t, 50, d[broadcast.DropUnsigned])
	require.EqualValues(t, 100+3+1, d[broadcast.DropForged])

	// A process without keys checks nothing: it took every message.
	require.Zero(t, open.Dropped()[broadcast.DropForged])
	require.Zero(t, open.Dropped()[broadcast.DropUnsigned])

	// Once the old key is retired, what it signs is forged.
	retired := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: broadcast.Keys{newKey}})
	sr := subscribe(t, retired, "signed")
	require.NoError(t, signedOld.Publish(ctx, "signed", "old"))
	requireEmpty(t, signedNew, sr, "signed")
	require.EqualValues(t, 1, retired.Dropped()[broadcast.DropForged])
}

// captureEnvelope publishes one message with b and returns the payload
// Postgres carried, read on a connection of the test's own.
func captureEnvelope(t *testing.T, tb testBundle, b *broadcast.Broker, channel, data string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := tb.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN ferry_broadcast")
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(ctx, "UNLISTEN *") }()
	require.NoError(t, b.Publish(ctx, channel, data))
	n, err := conn.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.Contains(t, n.Payload, `"s"`, "a signed envelope")
	return n.Payload
}

// A genuine signed envelope, captured off the channel and NOTIFYed again by
// whoever can connect, is delivered once: each replay within the window is
// refused and counted, and a genuine envelope published outside the window
// (an old one, or one dated too far ahead) is refused as stale.
func TestBroker_Replay(t *testing.T) {
	t.Parallel()
	tb := setup(t, true)
	ctx := context.Background()
	key := newKey(t)
	keys := broadcast.Keys{key}

	recv := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: keys})
	s := subscribe(t, recv, "replay")
	pub := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: keys})

	env := captureEnvelope(t, tb, pub, "replay", "genuine")
	requireMessage(t, s, "replay", `"genuine"`)
	large := strings.Repeat("L", 9000)
	ref := captureEnvelope(t, tb, pub, "replay", large)
	require.Contains(t, ref, `"r"`, "a large message travels by reference")
	requireMessage(t, s, "replay", `"`+large+`"`)

	// Plain SQL from another connection: 100 replays of the inline
	// envelope, 5 of the large message's reference.
	for range 100 {
		_, err := tb.pool.Exec(ctx, `SELECT pg_notify('ferry_broadcast', $1)`, env)
		require.NoError(t, err)
	}
	for range 5 {
		_, err := tb.pool.Exec(ctx, `SELECT pg_notify('ferry_broadcast', $1)`, ref)
		require.NoError(t, err)
	}
	// The same signature spelled another way: a 32-byte MAC is 43 base64
	// characters, whose last two bits are unused.
	_, err := tb.pool.Exec(ctx, `SELECT pg_notify('ferry_broadcast', $1)`, respell(t, env))
	require.NoError(t, err)
	// Signed with the key, but dated an hour ago and an hour ahead.
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		dated := newBroker(t, broadcast.Config{Pool: tb.pool, Keys: keys, Now: func() time.Time { return time.Now().Add(skew) }})
		require.NoError(t, dated.Publish(ctx, "replay", "stale"))
	}

	requireEmpty(t, pub, s, "replay")
	d := recv.Dropped()
	require.EqualValues(t, 106, d[broadcast.DropReplayed])
	require.EqualValues(t, 2, d[broadcast.DropStale])
	require.Zero(t, d[broadcast.DropForged], "genuine envelopes, refused for their time or their repetition only")
}

// respell returns env with its signature's last character changed in the
// bits base64 leaves unused: other text, the same MAC.
func respell(t *testing.T, env string) string {
	t.Helper()
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	i := strings.Index(env, `"s":"`)
	require.Positive(t, i)
	sig := env[i+5 : i+5+43]
	last := strings.IndexByte(alphabet, sig[42])
	other := sig[:42] + string(alphabet[last^1])
	a, err := base64.RawStdEncoding.DecodeString(sig)
	require.NoError(t, err)
	b, err := base64.RawStdEncoding.DecodeString(other)
	require.NoError(t, err)
	require.Equal(t, a, b, "one MAC")
	return strings.Replace(env, sig, other, 1)
}
