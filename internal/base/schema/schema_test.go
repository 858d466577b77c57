package schema

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]string{"": "", "public": "", "billing": "billing", "team_2": "team_2", "_x": "_x"} {
		got, err := Parse(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, bad := range []string{"Billing", "2team", "a-b", "a.b", `a"b`, "pg_temp", "x123456789012345678901234567890123456789x"} {
		_, err := Parse(bad)
		require.Error(t, err, bad)
	}
	t.Setenv(Env, "BAD")
	_, err := FromEnv()
	require.ErrorContains(t, err, "FERRY_SCHEMA: schema \"BAD\"")
}

// The default schema keeps every key and channel; two schemas get keys
// apart from each other and from the default's.
func TestKeysAndChannels(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(911000001), Key64(911000001, ""))
	require.Equal(t, int32(911000003), Key32(911000003, ""))
	require.Equal(t, "ferry_outbox", Channel("ferry_outbox", ""))
	require.Equal(t, "ferry_outbox.billing", Channel("ferry_outbox", "billing"))
	a, b := Key64(911000001, "billing"), Key64(911000001, "shipping")
	require.NotEqual(t, a, b)
	require.NotEqual(t, int64(911000001), a)
	require.Equal(t, a, Key64(911000001, "billing"), "stable")
	require.Equal(t, int64(911000001), a&0xffffffff)
	require.NotEqual(t, Key32(911000003, "billing"), Key32(911000003, "shipping"))
	require.NotEqual(t, int32(911000003), Key32(911000003, "billing"))
}
