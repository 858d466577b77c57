package seal_test

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/seal"
)

// newKey returns a fresh random key, base64.
func newKey(*testing.T) string { return seal.GenerateKey() }

func mustKeys(t *testing.T, s string) *seal.Keys {
	t.Helper()
	k, err := seal.ParseKeys(s)
	require.NoError(t, err)
	return k
}

func TestParseKeys(t *testing.T) {
	t.Parallel()

	t.Run("Rotation", func(t *testing.T) {
		t.Parallel()
		a, b := newKey(t), newKey(t)
		ks := mustKeys(t, b+", "+a)
		require.Equal(t, 2, ks.Len())
		require.Equal(t, mustKeys(t, b).IDs()[0], ks.IDs()[0], "the first key seals")
		require.Equal(t, mustKeys(t, a).IDs()[0], ks.IDs()[1])
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		ks, err := seal.ParseKeys("  ")
		require.NoError(t, err)
		require.Zero(t, ks.Len())
	})

	short := base64.StdEncoding.EncodeToString([]byte("sixteen byte key"))
	good := newKey(t)
	for name, tc := range map[string]struct{ in, want string }{
		"NotBase64":  {good + ",not*base64!", "FERRY_SEAL_KEYS: key 2 of 2 is not base64"},
		"Short":      {short, "FERRY_SEAL_KEYS: key 1 of 1 decodes to 16 bytes; a key needs at least 32"},
		"EmptyEntry": {good + ",", "FERRY_SEAL_KEYS: key 2 of 2 is empty"},
		"Repeated":   {good + "," + good, "FERRY_SEAL_KEYS: key 2 of 2 repeats an earlier key"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := seal.ParseKeys(tc.in)
			require.ErrorContains(t, err, tc.want)
			require.NotContains(t, err.Error(), good, "an error never shows a key")
			require.NotContains(t, err.Error(), short)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// TestKeys_NeverPrinted: whatever verb a Keys is printed with, by value or
// pointer, no key, and nothing derived from one but its id, shows.
func TestKeys_NeverPrinted(t *testing.T) {
	t.Parallel()
	raw := make([]byte, 32)
	_, err := rand.Read(raw)
	require.NoError(t, err)
	enc := base64.StdEncoding.EncodeToString(raw)
	ks := mustKeys(t, enc)
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%x", "%q"} {
		for _, v := range []any{ks, *ks, struct{ K *seal.Keys }{ks}} {
			out := fmt.Sprintf(verb, v)
			require.Contains(t, out, "redacted", "%s of %T", verb, v)
			require.NotContains(t, out, enc)
			require.NotContains(t, strings.ToLower(out), fmt.Sprintf("%x", raw[:8]))
		}
	}
}
