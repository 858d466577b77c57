package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNewRoutes(t *testing.T) {
	t.Parallel()
	ok := Route{Topic: "order.placed", Name: "billing", URL: "http://billing:8080/hook"}

	rs, err := NewRoutes(ok)
	require.NoError(t, err)
	got, found := rs.Get("billing")
	require.True(t, found)
	require.Equal(t, DefaultRouteTimeout, got.Timeout)

	for name, tc := range map[string]struct {
		routes []Route
		index  int
		route  string
	}{
		"no receiver":  {[]Route{ok, {Topic: "a", Name: "r"}}, 1, "r"},
		"bad topic":    {[]Route{{Topic: "a b", Name: "r", URL: "http://x/"}}, 0, "r"},
		"name in use":  {[]Route{ok, ok}, 1, "billing"},
		"long timeout": {[]Route{ok, {Topic: "a", Name: "slow", URL: "http://x/", Timeout: 11 * time.Minute}}, 1, "slow"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := NewRoutes(tc.routes...)
			var re *RouteError
			require.ErrorAs(t, err, &re)
			require.Equal(t, tc.index, re.Index)
			require.Equal(t, tc.route, re.Name)
			require.Error(t, re.Unwrap())
		})
	}
}
