package dburl

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://ferry:s3cret@127.0.0.1:5432/ferry":                "postgres://ferry:xxxxx@127.0.0.1:5432/ferry",
		"failed to connect to `postgresql://u:p%40ss@h/db?sslmode=x`": "failed to connect to `postgresql://u:xxxxx@h/db?sslmode=x`",
		"host=h user=u password=s3cret dbname=d":                      "host=h user=u password=xxxxx dbname=d",
		"host=h password='s3 cret' dbname=d":                          "host=h password=xxxxx dbname=d",
		"postgres://h/db?user=u&password=s3cret&sslmode=disable":      "postgres://h/db?user=u&password=xxxxx&sslmode=disable",
		"postgres://ferry@127.0.0.1/ferry":                            "postgres://ferry@127.0.0.1/ferry",
		"no url here":                                                 "no url here",
	} {
		require.Equal(t, want, Redact(in), in)
	}
}

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
