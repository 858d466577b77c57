package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

func TestParseRaw(t *testing.T) {
	t.Parallel()

	for name, raw := range map[string]string{
		"Array":        `[{"a":1}]`,
		"String":       `"hello"`,
		"Number":       `42`,
		"Null":         `null`,
		"Empty":        ``,
		"InvalidJSON":  `{"a":`,
		"TrailingData": `{"a":1} {"b":2}`,
	} {
		t.Run("NotAnObject"+name, func(t *testing.T) {
			t.Parallel()
			for _, kind := range []string{"acme.report", "ferry.noop"} {
				_, err := jobs.ParseRaw(kind, []byte(raw))
				require.Error(t, err)
				require.Contains(t, err.Error(), "args must be a JSON object")
			}
		})
	}

	t.Run("NotAnObjectSaysWhat", func(t *testing.T) {
		t.Parallel()
		_, err := jobs.ParseRaw("acme.report", []byte(`[1]`))
		require.ErrorContains(t, err, "got a JSON array")
		_, err = jobs.ParseRaw("acme.report", []byte(` null `))
		require.ErrorContains(t, err, "got null")
	})

	t.Run("OverMaxArgsBytes", func(t *testing.T) {
		t.Parallel()
		raw := `{"a":"` + strings.Repeat("x", jobs.MaxArgsBytes) + `"}`
		_, err := jobs.ParseRaw("acme.report", []byte(raw))
		require.Error(t, err)
		require.Contains(t, err.Error(), fmt.Sprintf("over the %d byte limit", jobs.MaxArgsBytes))
	})

	t.Run("AtMaxArgsBytes", func(t *testing.T) {
		t.Parallel()
		raw := `{"a":"` + strings.Repeat("x", jobs.MaxArgsBytes-len(`{"a":""}`)) + `"}`
		require.Len(t, raw, jobs.MaxArgsBytes)
		_, err := jobs.ParseRaw("acme.report", []byte(raw))
		require.NoError(t, err)
	})

	for name, tc := range map[string]struct{ kind, raw string }{
		"Noop":        {"ferry.noop", `{"slep":"1s"}`},
		"HTTPRequest": {"http.request", `{"url":"http://app.example","methd":"GET"}`},
	} {
		t.Run("UnknownFieldBuiltin"+name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.ParseRaw(tc.kind, []byte(tc.raw))
			require.Error(t, err)
			require.Contains(t, err.Error(), "args do not fit "+tc.kind)
			require.Contains(t, err.Error(), "unknown field")
		})
	}

	t.Run("WrongTypeBuiltin", func(t *testing.T) {
		t.Parallel()
		_, err := jobs.ParseRaw("ferry.noop", []byte(`{"sleep":"soon"}`))
		require.ErrorContains(t, err, "args do not fit ferry.noop")
	})

	t.Run("UnknownKindAnyObjectCompacted", func(t *testing.T) {
		t.Parallel()
		raw := "{\n  \"b\" : [1, 2],\n  \"a\" : {\"c\": null, \"anything\": \"goes\"}\n}\n"
		got, err := jobs.ParseRaw("acme.report", []byte(raw))
		require.NoError(t, err)
		require.Equal(t, "acme.report", got.Kind())
		require.Equal(t, `{"b":[1,2],"a":{"c":null,"anything":"goes"}}`, string(got.JSON))
		b, err := json.Marshal(got)
		require.NoError(t, err)
		require.Equal(t, string(got.JSON), string(b))
	})

	t.Run("BuiltinValid", func(t *testing.T) {
		t.Parallel()
		got, err := jobs.ParseRaw("http.request", []byte(`{ "url": "https://app.example/warm", "method": "post", "timeout": "5s", "headers_env": {"Authorization": "API_TOKEN"} }`))
		require.NoError(t, err)
		require.Equal(t, `{"url":"https://app.example/warm","method":"post","timeout":"5s","headers_env":{"Authorization":"API_TOKEN"}}`, string(got.JSON))

		_, err = jobs.ParseRaw("ferry.noop", []byte(`{}`))
		require.NoError(t, err)
		_, err = jobs.ParseRaw("ferry.noop", []byte(`{"sleep":null}`))
		require.NoError(t, err)
	})

	for name, raw := range map[string]string{
		"RelativeURL":  `{"url":"/warm"}`,
		"NoURL":        `{}`,
		"BadScheme":    `{"url":"file:///etc/passwd"}`,
		"BadMethod":    `{"url":"http://app.example","method":"FETCH"}`,
		"TimeoutOver":  `{"url":"http://app.example","timeout":"11m"}`,
		"EmptyEnvName": `{"url":"http://app.example","headers_env":{"Authorization":""}}`,
	} {
		t.Run("HTTPRequestInvalid"+name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.ParseRaw("http.request", []byte(raw))
			require.Error(t, err)
			require.Contains(t, err.Error(), "http.request: ")
		})
	}
}

func TestWithUniqueKey(t *testing.T) {
	t.Parallel()

	t.Run("NilOpts", func(t *testing.T) {
		t.Parallel()
		opts := jobs.WithUniqueKey(nil, "k1")
		require.JSONEq(t, `{"ferry_unique_key":"k1"}`, string(opts.Metadata))
	})

	t.Run("KeepsOptsAndMetadata", func(t *testing.T) {
		t.Parallel()
		in := &river.InsertOpts{Queue: "reports", Priority: 2, Metadata: []byte(`{"team":"ops"}`)}
		opts := jobs.WithUniqueKey(in, "k1")
		require.Equal(t, "reports", opts.Queue)
		require.Equal(t, 2, opts.Priority)
		require.JSONEq(t, `{"team":"ops","ferry_unique_key":"k1"}`, string(opts.Metadata))
		require.JSONEq(t, `{"team":"ops"}`, string(in.Metadata), "the caller's opts are not changed")
	})
}

var kindSeq atomic.Int64

// uniqueKind names a job kind no other test inserts.
func uniqueKind(prefix string) string { return fmt.Sprintf("test.%s.%d", prefix, kindSeq.Add(1)) }

// insertQueue is a queue no test client works, so the jobs these tests
// commit stay available.
const insertQueue = "insert_test"

func TestInserter_InsertTx(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		pool *pgxpool.Pool
		ins  *jobs.Inserter
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		pool := pgtest.Pool(t)
		ins, err := jobs.NewInserter(pool)
		require.NoError(t, err)
		require.NotNil(t, ins.Client())
		return &testBundle{pool: pool, ins: ins}
	}

	// insert inserts one job in a transaction of its own and commits.
	insert := func(t *testing.T, b *testBundle, args river.JobArgs, opts *river.InsertOpts) *rivertype.JobInsertResult {
		t.Helper()
		var res *rivertype.JobInsertResult
		require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			var err error
			res, err = b.ins.InsertTx(t.Context(), tx, args, opts)
			return err
		}))
		return res
	}

	countKind := func(t *testing.T, db jobs.DBTX, kind string) int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*) FROM river_job WHERE kind = $1", kind).Scan(&n))
		return n
	}

	countURL := func(t *testing.T, db jobs.DBTX, url string) int {
		t.Helper()
		var n int
		require.NoError(t, db.QueryRow(t.Context(), "SELECT count(*) FROM river_job WHERE kind = 'http.request' AND args->>'url' = $1", url).Scan(&n))
		return n
	}

	raw := func(kind, js string) jobs.RawArgs { return jobs.RawArgs{KindName: kind, JSON: json.RawMessage(js)} }
	opts := func(key string) *river.InsertOpts {
		return jobs.WithUniqueKey(&river.InsertOpts{Queue: insertQueue}, key)
	}

	t.Run("UniqueKeySameKindAndKeyDuplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		kind := uniqueKind("uniq")

		first := insert(t, b, raw(kind, `{"n":1}`), opts("2024-06-01"))
		require.False(t, first.UniqueSkippedAsDuplicate)
		second := insert(t, b, raw(kind, `{"n":2}`), opts("2024-06-01"))
		require.True(t, second.UniqueSkippedAsDuplicate)
		require.Equal(t, first.Job.ID, second.Job.ID)
		require.JSONEq(t, `{"n":1}`, string(second.Job.EncodedArgs), "the first job is returned")
		require.Equal(t, 1, countKind(t, b.pool, kind))
	})

	t.Run("UniqueKeyBuiltinArgs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		key := uniqueKind("warm")
		args := jobs.HTTPRequestArgs{URL: "https://app.example/warm"}

		first := insert(t, b, args, opts(key))
		second := insert(t, b, args, opts(key))
		require.True(t, second.UniqueSkippedAsDuplicate)
		require.Equal(t, first.Job.ID, second.Job.ID)
	})

	t.Run("UniqueKeyDifferentKeyInserts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		kind := uniqueKind("uniq")

		first := insert(t, b, raw(kind, `{}`), opts("a"))
		second := insert(t, b, raw(kind, `{}`), opts("b"))
		require.False(t, second.UniqueSkippedAsDuplicate)
		require.NotEqual(t, first.Job.ID, second.Job.ID)
		require.Equal(t, 2, countKind(t, b.pool, kind))
	})

	t.Run("UniqueKeyDifferentKindInserts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		kindA, kindB := uniqueKind("uniq"), uniqueKind("uniq")

		first := insert(t, b, raw(kindA, `{}`), opts("same"))
		second := insert(t, b, raw(kindB, `{}`), opts("same"))
		require.False(t, second.UniqueSkippedAsDuplicate)
		require.NotEqual(t, first.Job.ID, second.Job.ID)
	})

	t.Run("NoKeyTwoJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		kind := uniqueKind("plain")

		first := insert(t, b, raw(kind, `{}`), &river.InsertOpts{Queue: insertQueue})
		second := insert(t, b, raw(kind, `{}`), &river.InsertOpts{Queue: insertQueue})
		require.False(t, second.UniqueSkippedAsDuplicate)
		require.NotEqual(t, first.Job.ID, second.Job.ID)
		require.Equal(t, 2, countKind(t, b.pool, kind))
	})

	t.Run("RolledBackLeavesNoJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		kind := uniqueKind("rollback")

		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck
		res, err := b.ins.InsertTx(t.Context(), tx, raw(kind, `{}`), opts("k"))
		require.NoError(t, err)
		require.Equal(t, 1, countKind(t, tx, kind), "visible inside the transaction")
		require.Equal(t, 0, countKind(t, b.pool, kind), "invisible outside before commit")
		require.NoError(t, tx.Rollback(t.Context()))

		require.Equal(t, 0, countKind(t, b.pool, kind))
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM river_job WHERE id = $1", res.Job.ID).Scan(&n))
		require.Zero(t, n)

		// The key is free again: a new insert is not a duplicate.
		again := insert(t, b, raw(kind, `{}`), opts("k"))
		require.False(t, again.UniqueSkippedAsDuplicate)
	})

	t.Run("RawArgsStoredAsGiven", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		kind := uniqueKind("raw")
		args, err := jobs.ParseRaw(kind, []byte(` { "to" : "ops" , "n": [1, 2] } `))
		require.NoError(t, err)

		res := insert(t, b, args, &river.InsertOpts{Queue: insertQueue})
		require.Equal(t, kind, res.Job.Kind)
		require.Equal(t, insertQueue, res.Job.Queue)
		require.JSONEq(t, `{"to":"ops","n":[1,2]}`, string(res.Job.EncodedArgs))
	})

	t.Run("InvalidArgsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck
		url := "/" + uniqueKind("relative")
		_, err = b.ins.InsertTx(t.Context(), tx, jobs.HTTPRequestArgs{URL: url}, nil)
		require.ErrorContains(t, err, "not an absolute http(s) URL")
		require.Equal(t, 0, countURL(t, tx, url))
	})

	t.Run("OverMaxArgsBytesRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		tx, err := b.pool.Begin(t.Context())
		require.NoError(t, err)
		defer tx.Rollback(context.WithoutCancel(t.Context())) //nolint:errcheck
		url := "https://app.example/" + uniqueKind("upload")
		args := jobs.HTTPRequestArgs{URL: url, Method: "POST", Body: strings.Repeat("x", jobs.MaxArgsBytes)}
		_, err = b.ins.InsertTx(t.Context(), tx, args, nil)
		require.ErrorContains(t, err, fmt.Sprintf("over the %d byte limit", jobs.MaxArgsBytes))
		require.Equal(t, 0, countURL(t, tx, url))
	})
}
