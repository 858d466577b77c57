package seal

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/pgtest"
)

// TestVersion1Seal: a job sealed in version 1's form (a JSON object, as
// ferry wrote seals before the compact form) still verifies, and the
// database claims its run id like a version-2 seal's: a copy is refused.
func TestVersion1Seal(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := t.Context()
	_, err := Arm(ctx, pool)
	require.NoError(t, err)
	keys, err := ParseKeys(GenerateKey())
	require.NoError(t, err)
	k := keys.keys[0]
	queue := fmt.Sprintf("seal_v1_%d", time.Now().UnixNano())
	args := []byte(`{"n":1}`)
	canon, err := canonical(args)
	require.NoError(t, err)
	st := stamp{V: 1, K: k.id, R: "v1-run-" + queue, Q: queue, D: time.Now().Unix()}
	st.M = base64.RawURLEncoding.EncodeToString(st.mac(k, "seal_test.v1", canon))
	obj, err := json.Marshal(st)
	require.NoError(t, err)
	meta, err := json.Marshal(map[string]json.RawMessage{MetadataKey: obj})
	require.NoError(t, err)

	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	insert := func() int64 {
		t.Helper()
		var id int64
		require.NoError(t, pool.QueryRow(ctx, `
			INSERT INTO river_job (args, kind, max_attempts, metadata, queue, state)
			VALUES ($1, 'seal_test.v1', 25, $2, $3, 'available') RETURNING id`, args, meta, queue).Scan(&id))
		return id
	}
	get := func(id int64) *rivertype.JobRow {
		t.Helper()
		job, err := client.JobGet(ctx, id)
		require.NoError(t, err)
		return job
	}
	v, err := NewVerifier(VerifierConfig{Keys: keys})
	require.NoError(t, err)
	orig, cp := insert(), insert()
	require.Nil(t, v.Check(get(orig)))
	refusal := v.Check(get(cp))
	require.NotNil(t, refusal)
	require.Equal(t, ReasonReplayed, refusal.Reason)
}
