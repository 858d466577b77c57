package seal

import (
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// TestCheck_KeyPrefixShared: a version-3 seal names 16 bits of its key's
// id; of two keys of a worker that share them, the one that sealed the job
// verifies it whichever comes first, and an altered job is refused by both.
func TestCheck_KeyPrefixShared(t *testing.T) {
	t.Parallel()
	a, b := keysSharingPrefix(t)
	sealer, err := ParseKeys(a)
	require.NoError(t, err)
	args, tag, err := Seal(sealer, "seal_test.prefix", "default", []byte(`{"n":1}`), time.Now())
	require.NoError(t, err)
	job := func(args []byte) *rivertype.JobRow {
		return &rivertype.JobRow{ID: 1, Kind: "seal_test.prefix", Queue: "default", Attempt: 1, EncodedArgs: args, Metadata: []byte(`{}`), Tags: []string{tag}}
	}
	for _, set := range []string{a + "," + b, b + "," + a} {
		keys, err := ParseKeys(set)
		require.NoError(t, err)
		require.Equal(t, keys.IDs()[0][:keyPrefixLen], keys.IDs()[1][:keyPrefixLen])
		v, err := NewVerifier(VerifierConfig{Keys: keys})
		require.NoError(t, err)
		require.Nil(t, v.Check(job(args)))
		refusal := v.Check(job([]byte(`{"n":2}`)))
		require.NotNil(t, refusal)
		require.Equal(t, ReasonInvalid, refusal.Reason)
		require.Contains(t, refusal.Detail, "altered")
	}

	// A key of another prefix (drawn again in the 1 in 65,536 case that
	// it shares the sealer's).
	other, err := ParseKeys(GenerateKey())
	require.NoError(t, err)
	for other.IDs()[0][:keyPrefixLen] == sealer.IDs()[0][:keyPrefixLen] {
		other, err = ParseKeys(GenerateKey())
		require.NoError(t, err)
	}
	v, err := NewVerifier(VerifierConfig{Keys: other})
	require.NoError(t, err)
	refusal := v.Check(job(args))
	require.NotNil(t, refusal)
	require.Equal(t, ReasonInvalid, refusal.Reason)
	require.Contains(t, refusal.Detail, "which this worker does not have")
}

// TestSeal_Compact: a version-3 seal of a job of the default queue is 65
// characters, its fields where the database reads them (run id third, due
// fourth, migrations 014 and 021).
func TestSeal_Compact(t *testing.T) {
	t.Parallel()
	keys, err := ParseKeys(GenerateKey())
	require.NoError(t, err)
	due := time.Unix(1_900_000_000, 0)
	for _, enc := range []bool{false, true} {
		k := keys
		if enc {
			k = keys.WithEncryption(true)
		}
		_, text, err := Seal(k, "kind", "default", []byte(`{}`), due)
		require.NoError(t, err)
		st, err := parseStamp(gjson.Result{Type: gjson.String, Str: text})
		require.NoError(t, err)
		require.Equal(t, text, st.encode())
		f := strings.Split(text, ".")
		require.Len(t, f, 6, text)
		if enc {
			require.Equal(t, "3e", f[0])
			require.Len(t, text, 66)
		} else {
			require.Equal(t, "3", f[0])
			require.Len(t, text, 65)
		}
		require.Equal(t, keys.IDs()[0][:keyPrefixLen], f[1])
		require.Len(t, f[2], 16, "run id")
		require.Equal(t, "1900000000", f[3])
		require.Len(t, f[4], 22, "MAC")
		require.Equal(t, "default", f[5])
	}
}

// keysSharingPrefix returns two keys (base64) whose ids share their first
// keyPrefixLen hex digits: a few hundred tries.
func keysSharingPrefix(t *testing.T) (string, string) {
	t.Helper()
	seen := map[string]string{}
	for range 1 << 16 {
		raw := make([]byte, 32)
		_, _ = rand.Read(raw)
		k, err := derive(raw)
		require.NoError(t, err)
		enc := base64.StdEncoding.EncodeToString(raw)
		if prev, ok := seen[k.id[:keyPrefixLen]]; ok {
			return prev, enc
		}
		seen[k.id[:keyPrefixLen]] = enc
	}
	t.Fatal("no two keys shared a prefix in 65,536 tries")
	return "", ""
}

// TestCheck_Missing: a job without a seal tag or a seal in its metadata
// (none, empty, another key, a JSON null; tags that are not seals) is
// refused as missing, not malformed.
func TestCheck_Missing(t *testing.T) {
	t.Parallel()
	keys, err := ParseKeys(GenerateKey())
	require.NoError(t, err)
	v, err := NewVerifier(VerifierConfig{Keys: keys})
	require.NoError(t, err)
	for _, m := range []string{`{}`, `{"other": "3.x"}`, `{"ferry_seal": null}`} {
		for _, tags := range [][]string{nil, {"nightly"}, {"3", "3e", "3x.y", "x3.y"}} {
			refusal := v.Check(&rivertype.JobRow{ID: 1, Kind: "k", Queue: "default", Attempt: 1, EncodedArgs: []byte(`{}`), Metadata: []byte(m), Tags: tags})
			require.NotNil(t, refusal, "%s %q", m, tags)
			require.Equal(t, ReasonMissing, refusal.Reason, "%s %q", m, tags)
		}
	}
}
