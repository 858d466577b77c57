package dburl

import (
	"testing"

	"github.com/jackc/pgx/v5"
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

func TestPooler(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"": PoolerNone, "none": PoolerNone, "session": PoolerSession, "transaction": PoolerTransaction} {
		got, err := ParsePooler(in)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	_, err := ParsePooler("Transaction")
	require.EqualError(t, err, `FERRY_POOLER: want none, session or transaction, got "Transaction"`)

	cfg, err := pgx.ParseConfig("postgres://u@127.0.0.1/db")
	require.NoError(t, err)
	ApplyPooler(cfg, PoolerSession)
	require.Equal(t, pgx.QueryExecModeCacheStatement, cfg.DefaultQueryExecMode, "a session keeps prepared statements")
	ApplyPooler(cfg, PoolerTransaction)
	require.Equal(t, pgx.QueryExecModeCacheDescribe, cfg.DefaultQueryExecMode)
}

func TestWithSearchPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"postgres://u@h/db": "postgres://u@h/db?search_path=billing",
		"postgres://u@h1:5432,h2:5433/db?sslmode=disable": "postgres://u@h1:5432,h2:5433/db?sslmode=disable&search_path=billing",
		"host=h user=u dbname=db":                         "host=h user=u dbname=db search_path=billing",
		"postgres://u@h/db?search_path=billing":           "postgres://u@h/db?search_path=billing",
	} {
		got, err := WithSearchPath(in, "billing")
		require.NoError(t, err, in)
		require.Equal(t, want, got)
		cfg, err := pgx.ParseConfig(got)
		require.NoError(t, err)
		require.Equal(t, "billing", cfg.RuntimeParams["search_path"], in)
	}
	same, err := WithSearchPath("postgres://u@h/db", "")
	require.NoError(t, err)
	require.Equal(t, "postgres://u@h/db", same)
	_, err = WithSearchPath("postgres://u:s3cret@h/db?search_path=other", "billing")
	require.ErrorContains(t, err, `sets search_path "other", not the schema "billing"`)
	require.NotContains(t, err.Error(), "s3cret")
}
