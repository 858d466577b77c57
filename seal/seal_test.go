package seal_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/pgtest"
	"github.com/ferryq/ferry/seal"
)

// rawArgs are args given as JSON text, as the enqueue CLI gives them.
type rawArgs struct{ doc string }

func (rawArgs) Kind() string                   { return "seal_test.raw" }
func (r rawArgs) MarshalJSON() ([]byte, error) { return []byte(r.doc), nil }

// TestSeal_JSONBRoundTrip: the seal covers the args as the worker reads
// them back from jsonb, which reorders keys, drops spaces, rewrites
// numbers and escapes, and keeps the last of repeated keys.
func TestSeal_JSONBRoundTrip(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	keys := mustKeys(t, newKey(t))
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(keys)}})
	require.NoError(t, err)
	v, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys})
	require.NoError(t, err)

	docs := []string{
		`{ "zeta" : 1, "a" : 2 ,"mid": [3, 2, 1] }`,
		`{"n": [1.50, 15e-1, 1E+2, -0, 0.1e-2, 123456789012345678901234567890, -7, 0.0]}`,
		`{"s": "\u00e9\u2028<>&\"\\\/\t", "k\u00e9y": {"y": true, "z": null}}`,
		`{"dup": 1, "dup": 2}`,
		`{}`,
	}
	for i, doc := range docs {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			res, err := ins.Insert(t.Context(), rawArgs{doc}, &river.InsertOpts{Queue: fmt.Sprintf("seal_rt_%d", queueSeq.Add(1))})
			require.NoError(t, err)
			job, err := ins.JobGet(t.Context(), res.Job.ID)
			require.NoError(t, err)
			refusal := v.Check(job)
			require.Nil(t, refusal, "args %s, stored as %s", doc, job.EncodedArgs)
		})
	}

	t.Run("jsonb rewrites the text", func(t *testing.T) {
		// Else the cases above would prove nothing.
		var stored string
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT $1::jsonb::text`, docs[1]).Scan(&stored))
		require.NotEqual(t, docs[1], stored)
	})

	t.Run("a changed number is a changed value", func(t *testing.T) {
		res, err := ins.Insert(t.Context(), rawArgs{`{"n": 1.50}`}, &river.InsertOpts{Queue: fmt.Sprintf("seal_rt_%d", queueSeq.Add(1))})
		require.NoError(t, err)
		_, err = pool.Exec(t.Context(), `UPDATE river_job SET args = '{"n": 1.5000001}' WHERE id = $1`, res.Job.ID)
		require.NoError(t, err)
		job, err := ins.JobGet(t.Context(), res.Job.ID)
		require.NoError(t, err)
		refusal := v.Check(job)
		require.NotNil(t, refusal)
		require.Equal(t, seal.ReasonInvalid, refusal.Reason)
	})
}

// TestSeal_KeepsMetadata: sealing keeps what the metadata held.
func TestSeal_KeepsMetadata(t *testing.T) {
	t.Parallel()
	keys := mustKeys(t, newKey(t))
	_, meta, err := seal.Seal(keys, "k", "q", []byte(`{}`), []byte(`{"ferry_unique_key":"x"}`), time.Now())
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(meta, &m))
	require.Equal(t, "x", m["ferry_unique_key"])
	require.Contains(t, m, seal.MetadataKey)
}
