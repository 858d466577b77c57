package seal

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestOlderSeals: a job sealed in metadata.ferry_seal, where seals were
// before they moved into a tag (migration 021), in version 1's form (a
// JSON object), version 2's (a longer string, with the whole key id and
// MAC) or version 3's (a seal tag's string), still verifies, and the
// database claims its run id like a seal tag's: a copy is refused.
func TestOlderSeals(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	_, err := Arm(t.Context(), pool)
	require.NoError(t, err)
	keys, err := ParseKeys(GenerateKey())
	require.NoError(t, err)
	k := keys.keys[0]
	args := []byte(`{"n":1}`)
	canon, err := canonical(args)
	require.NoError(t, err)
	for _, v := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("Version%d", v), func(t *testing.T) {
			queue := fmt.Sprintf("seal_v%d_%d", v, time.Now().UnixNano())
			st := stamp{V: v, K: k.id, R: fmt.Sprintf("v%d-run-%s", v, queue), Q: queue, D: time.Now().Unix()}
			st.M = base64.RawURLEncoding.EncodeToString(st.mac(nil, k, "seal_test.v1", canon))
			if v < 3 {
				require.Len(t, st.M, 43, "the whole HMAC-SHA256")
			}
			var form json.RawMessage
			switch v {
			case 1:
				form, err = json.Marshal(st)
			case 2:
				form, err = json.Marshal(fmt.Sprintf("2.%s.%s.%d.0.%s.%s", st.K, st.R, st.D, st.M, st.Q))
			default:
				var tag string
				_, tag, err = Seal(keys, "seal_test.v1", queue, args, time.Now())
				require.NoError(t, err)
				form, err = json.Marshal(tag)
			}
			require.NoError(t, err)
			meta, err := json.Marshal(map[string]json.RawMessage{MetadataKey: form})
			require.NoError(t, err)
			checkCopyRefused(t, pool, keys, queue, args, meta)
		})
	}
}

// checkCopyRefused writes a job of args and meta and a copy of it, and
// checks that the first verifies and the copy is refused as replayed.
func checkCopyRefused(t *testing.T, pool *pgxpool.Pool, keys *Keys, queue string, args, meta []byte) {
	t.Helper()
	ctx := t.Context()

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
