package seal_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
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

// TestMiddleware_Tag: the insert middleware appends the seal to the
// job's tags, after the caller's, and leaves its metadata as it was; the
// seal verifies.
func TestMiddleware_Tag(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	keys := mustKeys(t, newKey(t))
	ins, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Middleware: []rivertype.Middleware{seal.Middleware(keys)}})
	require.NoError(t, err)
	v, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys})
	require.NoError(t, err)
	queue := fmt.Sprintf("seal_tag_%d", queueSeq.Add(1))
	res, err := ins.Insert(t.Context(), effectArgs{N: 1}, &river.InsertOpts{
		Queue: queue, Tags: []string{"nightly", "billing"}, Metadata: []byte(`{"trace": "abc"}`),
	})
	require.NoError(t, err)
	job, err := ins.JobGet(t.Context(), res.Job.ID)
	require.NoError(t, err)
	require.Len(t, job.Tags, 3)
	require.Equal(t, []string{"nightly", "billing"}, job.Tags[:2])
	tag, ok := seal.Tag(job.Tags)
	require.True(t, ok)
	require.Equal(t, job.Tags[2], tag)
	require.Regexp(t, `^3\.[0-9a-f]{4}\.[\w-]{16}\.\d+\.[\w-]{22}\.`+queue+`$`, tag)
	require.JSONEq(t, `{"trace": "abc"}`, string(job.Metadata))
	require.Nil(t, v.Check(job))
}

// TestTag_SameInSQL: the database takes the same tag for a job's seal as
// the worker (ferry_seal_tag, migration 021, and Tag): the last that
// begins "3." or "3e.". A claim made for another seal than the one
// checked would let a copy pass.
func TestTag_SameInSQL(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	for _, tags := range [][]string{
		nil, {}, {"nightly"}, {"3", "3e", "3x.y", "x3.y", "3e"},
		{"3.a.b.1.m.q"}, {"3e.a.b.1.m.q"}, {"3.a.b.1.m.q", "nightly"},
		{"nightly", "3.a.b.1.m.q"}, {"3.first.r1.1.m.q", "3e.last.r2.1.m.q"},
		{"3e.first.r1.1.m.q", "3.last.r2.1.m.q", "zzz"}, {"3.", "x"}, {"x", "3e."},
	} {
		want, ok := seal.Tag(tags)
		var got *string
		var run *string
		require.NoError(t, pool.QueryRow(t.Context(),
			`SELECT ferry_seal_tag($1::varchar(255)[]), ferry_seal_run_id($1::varchar(255)[], '{}')`, tags).Scan(&got, &run))
		if !ok {
			require.Nil(t, got, "%q", tags)
			require.Nil(t, run, "%q", tags)
			continue
		}
		require.NotNil(t, got, "%q", tags)
		require.Equal(t, want, *got, "%q", tags)
		if f := strings.Split(want, "."); len(f) > 2 && f[2] != "" {
			require.NotNil(t, run, "%q", tags)
			require.Equal(t, f[2], *run, "%q", tags)
		} else {
			require.Nil(t, run, "%q", tags)
		}
	}
}
