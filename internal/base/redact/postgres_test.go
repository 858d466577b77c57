package redact

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPostgres(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://ferry:s3cret@127.0.0.1:5432/ferry":                "postgres://ferry:xxxxx@127.0.0.1:5432/ferry",
		"failed to connect to `postgresql://u:p%40ss@h/db?sslmode=x`": "failed to connect to `postgresql://u:xxxxx@h/db?sslmode=x`",
		"host=h user=u password=s3cret dbname=d":                      "host=h user=u password=xxxxx dbname=d",
		"host=h password='s3 cret' dbname=d":                          "host=h password=xxxxx dbname=d",
		"postgres://h/db?user=u&password=s3cret&sslmode=disable":      "postgres://h/db?user=u&password=xxxxx&sslmode=disable",
		"postgres://ferry@127.0.0.1/ferry":                            "postgres://ferry@127.0.0.1/ferry",
		"no url here":                                                 "no url here",

		// Any case, every occurrence, an empty user.
		"POSTGRESQL://u:s3cret@h/db":                "POSTGRESQL://u:xxxxx@h/db",
		"a postgres://u:one@h, b postgres://:two@h": "a postgres://u:xxxxx@h, b postgres://:xxxxx@h",
		"host=h PASSWORD = 's3\\' cret' user=u":     "host=h PASSWORD = xxxxx user=u",
		"password=s3cret host=h":                    "password=xxxxx host=h",
		"postgres://h/db?Password=s3%20cret":        "postgres://h/db?Password=xxxxx",
		// A raw '@' in a URL password; sslpassword in both forms; a
		// keyword/value password after punctuation.
		"postgres://u:p@ss@h/db?application_name=a@b":  "postgres://u:xxxxx@h/db?application_name=a@b",
		"host=h sslpassword=k3y sslmode=verify-full":   "host=h sslpassword=xxxxx sslmode=verify-full",
		"postgres://h/db?sslpassword=k3y&sslmode=x":    "postgres://h/db?sslpassword=xxxxx&sslmode=x",
		"bad option (password=s3cret) in DATABASE_URL": "bad option (password=xxxxx in DATABASE_URL",
		// An unquoted value runs to the next whitespace.
		"cannot parse `host=h password=s3cret`: bad keyword": "cannot parse `host=h password=xxxxx bad keyword",
	} {
		require.Equal(t, want, Postgres(in), in)
	}
}
