package dburl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	got, err := WithDatabase("postgres://u:p@h:5432/ferry?sslmode=disable", "other")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:p@h:5432/other?sslmode=disable", got)
	require.Equal(t, "other", Database(got))

	_, err = WithDatabase("host=h user=u password=s3cret", "x")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}
