package seal

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnvelope_BoundToJob: an envelope opens only for the kind, queue, run
// id and due time it was sealed for.
func TestEnvelope_BoundToJob(t *testing.T) {
	t.Parallel()
	k, err := derive(make([]byte, 32))
	require.NoError(t, err)
	st := stamp{V: version, K: k.id, R: "run-a", Q: "default", D: 100, E: true}
	env, err := st.encrypt(k.enc, "kind", []byte(`{"secret":1}`))
	require.NoError(t, err)
	require.NotContains(t, string(env), "secret")

	plain, err := st.decrypt(k.enc, "kind", env)
	require.NoError(t, err)
	require.JSONEq(t, `{"secret":1}`, string(plain))

	for name, other := range map[string]stamp{
		"RunID": {V: version, R: "run-b", Q: "default", D: 100, E: true},
		"Queue": {V: version, R: "run-a", Q: "other", D: 100, E: true},
		"Due":   {V: version, R: "run-a", Q: "default", D: 101, E: true},
	} {
		_, err := other.decrypt(k.enc, "kind", env)
		require.Error(t, err, name)
	}
	_, err = st.decrypt(k.enc, "other.kind", env)
	require.Error(t, err, "kind")
	k2, err := derive(make([]byte, 33))
	require.NoError(t, err)
	_, err = st.decrypt(k2.enc, "kind", env)
	require.Error(t, err, "key")
}
