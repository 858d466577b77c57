package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// bulkResult is `enqueue bulk --json` output.
type bulkResult struct {
	Inserted   int     `json:"inserted"`
	Duplicates int     `json:"duplicates"`
	Seconds    float64 `json:"seconds"`
}

// bulkJSON runs `enqueue bulk --file - --json` with lines on stdin and
// requires success.
func bulkJSON(t *testing.T, url string, lines ...string) bulkResult {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, strings.NewReader(strings.Join(lines, "\n")+"\n"), "bulk", "--file", "-", "--json")
	require.Zero(t, code, "enqueue bulk: %s", stderr)
	require.Empty(t, stderr)
	var res bulkResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), "not JSON: %q", stdout)
	return res
}

// jobIDs returns the ids of every job in the database, in insert order.
func jobIDs(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT id FROM river_job ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

func TestBulk_Insert(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	_, err := pool.Exec(context.Background(),
		`INSERT INTO ferry_job_kind (kind, queue, description) VALUES ('app.report', 'reports', 'nightly report')`)
	require.NoError(t, err)

	at := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Second)
	lines := []string{
		`{"kind":"ferry.noop"}`,
		`{"kind":"http.request","args":{"url":"http://127.0.0.1:1/warm", "method":"POST"},"queue":"web","priority":2}`,
		``, // blank lines are skipped
		`{"kind":"ferry.noop","args":{"sleep":"1ms"},"scheduled_at":"` + at.Format(time.RFC3339) + `","tags":["nightly","ops_drill-2"],"max_attempts":3}`,
		`{"kind":"ferry.noop","unique_key":"k-1","priority":4}`,
		`{"kind":"app.report","args":{"day":"2026-11-30"},"unique_key":"k-1"}`,
	}
	path := writeFile(t, "jobs.jsonl", strings.Join(lines, "\n")+"\n")

	stdout, stderr, code := enqueue(t, url, nil, "bulk", "--file", path, "--json")
	require.Zero(t, code, stderr)
	require.Empty(t, stderr)
	var res bulkResult
	require.NoError(t, json.Unmarshal([]byte(stdout), &res), stdout)
	require.Equal(t, 5, res.Inserted)
	require.Zero(t, res.Duplicates)
	require.Positive(t, res.Seconds)

	ids := jobIDs(t, pool)
	require.Len(t, ids, 5)
	j := getJob(t, pool, ids[0])
	require.Equal(t, "ferry.noop", j.Kind)
	require.Equal(t, "default", j.Queue, "the kind's queue")
	require.Equal(t, "available", j.State)
	require.Equal(t, 1, j.Priority)
	require.Equal(t, 25, j.MaxAttempts)
	require.Empty(t, j.Args)
	require.Empty(t, j.Tags)

	j = getJob(t, pool, ids[1])
	require.Equal(t, "http.request", j.Kind)
	require.Equal(t, "web", j.Queue)
	require.Equal(t, 2, j.Priority)
	require.Equal(t, map[string]any{"url": "http://127.0.0.1:1/warm", "method": "POST"}, j.Args)

	j = getJob(t, pool, ids[2])
	require.Equal(t, "scheduled", j.State)
	require.InDelta(t, time.Until(at).Seconds(), j.ScheduledIn.Seconds(), 60)
	require.Equal(t, []string{"nightly", "ops_drill-2"}, j.Tags)
	require.Equal(t, 3, j.MaxAttempts)
	require.Equal(t, map[string]any{"sleep": "1ms"}, j.Args)

	j = getJob(t, pool, ids[3])
	require.Equal(t, "ferry.noop", j.Kind)
	require.Equal(t, 4, j.Priority)
	j = getJob(t, pool, ids[4])
	require.Equal(t, "app.report", j.Kind)
	require.Equal(t, "reports", j.Queue, "a registered kind's queue")

	var keyed int
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM river_job WHERE unique_key IS NOT NULL").Scan(&keyed))
	require.Equal(t, 2, keyed, "a unique key is per kind: both k-1 lines are jobs")

	t.Run("AgainSkipsUniqueKeys", func(t *testing.T) {
		// Not parallel: it counts the rows the parent inserted.
		stdout, stderr, code := enqueue(t, url, nil, "bulk", "--file", path)
		require.Zero(t, code, stderr)
		require.Contains(t, oneLine(t, stdout), "inserted 3 jobs in")
		require.Contains(t, stdout, "2 duplicates skipped")
		require.Equal(t, 8, countJobs(t, pool))
	})
}

// TestBulk_ManyBlocksInFileOrder: lines spread over many parsed blocks,
// with runs of unique keys in between (each ends one COPY and starts the
// next), all go in, in file order, and the jobs not scheduled share one
// scheduled_at, so that they run in that order.
func TestBulk_ManyBlocksInFileOrder(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	const n = 20_000
	lines := make([]string, n)
	for i := range lines {
		switch {
		case i%5000 >= 4990: // ten keyed lines every 5,000
			lines[i] = fmt.Sprintf(`{"kind":"ferry.noop","args":{"sleep":"%dms"},"unique_key":"u%d"}`, i, i)
		case i == 7777:
			lines[i] = fmt.Sprintf(`{"kind":"ferry.noop","args":{"sleep":"%dms"},"scheduled_at":"2099-01-01T00:00:00Z"}`, i)
		default:
			lines[i] = fmt.Sprintf(`{"kind":"ferry.noop","args":{"sleep":"%dms"}}`, i)
		}
	}
	res := bulkJSON(t, url, lines...)
	require.Equal(t, n, res.Inserted)
	require.Zero(t, res.Duplicates)

	rows, err := pool.Query(context.Background(), `SELECT args->>'sleep' FROM river_job ORDER BY id`)
	require.NoError(t, err)
	order, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, order, n)
	for i, got := range order {
		require.Equal(t, fmt.Sprintf("%dms", i), got, "job %d in id order", i)
	}

	var stamps, keyed, scheduled int
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT count(DISTINCT scheduled_at) FILTER (WHERE unique_key IS NULL AND state = 'available'),
		       count(*) FILTER (WHERE unique_key IS NOT NULL),
		       count(*) FILTER (WHERE state = 'scheduled')
		FROM river_job`).Scan(&stamps, &keyed, &scheduled))
	require.Equal(t, 1, stamps, "the copied jobs share one scheduled_at")
	require.Equal(t, 40, keyed)
	require.Equal(t, 1, scheduled)
}

func TestBulk_Stdin(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	in := strings.NewReader("{\"kind\":\"ferry.noop\"}\r\n{\"kind\":\"ferry.noop\",\"queue\":\"reports\"}\n{\"kind\":\"ferry.noop\",\"tags\":[\"from_stdin\"]}")
	stdout, stderr, code := enqueue(t, url, in, "bulk", "-f", "-")
	require.Zero(t, code, stderr)
	require.Empty(t, stderr)
	require.Regexp(t, `^inserted 3 jobs in [0-9.]+s \([0-9,]+/s\)$`, oneLine(t, stdout))

	ids := jobIDs(t, pool)
	require.Len(t, ids, 3)
	require.Equal(t, "reports", getJob(t, pool, ids[1]).Queue)
	require.Equal(t, []string{"from_stdin"}, getJob(t, pool, ids[2]).Tags)
}

func TestBulk_UniqueKeyRepeatedInFile(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	res := bulkJSON(t, url,
		`{"kind":"ferry.noop","unique_key":"a"}`,
		`{"kind":"ferry.noop","unique_key":"b"}`,
		`{"kind":"ferry.noop","unique_key":"a"}`,
		`{"kind":"ferry.noop"}`,
		`{"kind":"ferry.noop","unique_key":"b"}`,
	)
	require.Equal(t, bulkResult{Inserted: 3, Duplicates: 2, Seconds: res.Seconds}, res)
	require.Equal(t, 3, countJobs(t, pool))
}

// Lines with one debounce key collapse into one job with the last line's
// args, within the file and into a live job of the key.
func TestBulk_Debounce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	live := enqueueJSON(t, url, "ferry.noop", "--debounce", "c", "--debounce-window", "1h")
	res := bulkJSON(t, url,
		`{"kind":"ferry.noop","args":{"sleep":"1ms"},"debounce":{"key":"a","window":"1h"}}`,
		`{"kind":"ferry.noop","args":{"sleep":"2ms"},"debounce":{"key":"b","window":"1h","max_wait":"2h"}}`,
		`{"kind":"ferry.noop","args":{"sleep":"3ms"},"debounce":{"key":"a","window":"1h"}}`,
		`{"kind":"ferry.noop"}`,
		`{"kind":"ferry.noop","args":{"sleep":"4ms"},"debounce":{"key":"c","window":"1h"}}`,
	)
	require.Equal(t, bulkResult{Inserted: 3, Duplicates: 2, Seconds: res.Seconds}, res)
	require.Equal(t, 4, countJobs(t, pool), "a, b, the plain line, and the live c")
	var args string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT args::text FROM river_job WHERE metadata->'ferry_debounce'->>'key' = 'a'`).Scan(&args))
	require.JSONEq(t, `{"sleep":"3ms"}`, args, "the later line's args")
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT args::text FROM river_job WHERE id = $1`, live.ID).Scan(&args))
	require.JSONEq(t, `{"sleep":"4ms"}`, args, "collapsed into the live job")
}

func TestBulk_Empty(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)

	res := bulkJSON(t, url, "", "  ")
	require.Zero(t, res.Inserted)
}

func TestBulk_BadInput(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	good := `{"kind":"ferry.noop"}`
	// five lines, line 3 as given
	five := func(third string) string {
		return strings.Join([]string{good, good, third, good, good}, "\n") + "\n"
	}
	// 64 KiB of args is the limit; this is one byte more.
	oversized := `{"x":"` + strings.Repeat("a", 64<<10-len(`{"x":""}`)+1) + `"}`

	tests := []struct {
		name  string
		input string
		args  []string // replaces --file - when set
		env   []string // replaces the usual environment when set
		want  string   // in the message
	}{
		{name: "ArgsArray", input: five(`{"kind":"ferry.noop","args":[1,2]}`), want: "line 3: args must be a JSON object: got a JSON array"},
		{name: "ArgsNull", input: five(`{"kind":"ferry.noop","args":null}`), want: "line 3: args must be a JSON object"},
		{name: "ArgsUnknownField", input: five(`{"kind":"ferry.noop","args":{"slep":"1s"}}`), want: `line 3: args do not fit ferry.noop`},
		{name: "ArgsOver64KiB", input: five(`{"kind":"ferry.noop","args":` + oversized + `}`), want: "line 3: args are 65537 bytes, over the 65536 byte limit"},
		{name: "LineTooLong", input: five(`{"kind":"ferry.noop","args":{"x":"` + strings.Repeat("a", 200<<10) + `"}}`), want: "line 3: longer than"},
		{name: "UnknownKind", input: five(`{"kind":"no.such.kind"}`), want: `line 3: unknown job kind "no.such.kind"`},
		{name: "KindMissing", input: five(`{"args":{}}`), want: "line 3: kind is missing"},
		{name: "DebounceBadWindow", input: five(`{"kind":"ferry.noop","debounce":{"key":"a","window":"soon"}}`), want: `line 3: debounce window "soon": not a duration`},
		{name: "DebounceBlankKey", input: five(`{"kind":"ferry.noop","debounce":{"key":"","window":"1s"}}`), want: "line 3: debounce key is empty"},
		{name: "DebounceAndUniqueKey", input: five(`{"kind":"ferry.noop","unique_key":"u","debounce":{"key":"a","window":"1s"}}`), want: "line 3: debounce and unique_key"},
		{name: "NotJSON", input: five(`kind=ferry.noop`), want: "line 3: not a JSON object"},
		{name: "JSONArray", input: five(`["ferry.noop"]`), want: "line 3: not a JSON object: got a JSON array"},
		{name: "CutShort", input: five(`{"kind":"ferry.noop"`), want: "line 3: not a JSON object"},
		{name: "TrailingData", input: five(`{"kind":"ferry.noop"} {}`), want: "line 3: not a JSON object"},
		{name: "UnknownField", input: five(`{"kind":"ferry.noop","shceduled_at":"2030-01-01T00:00:00Z"}`), want: `line 3: unknown field "shceduled_at"`},
		{name: "PriorityNotANumber", input: five(`{"kind":"ferry.noop","priority":"high"}`), want: "line 3: priority: got a JSON string"},
		{name: "Priority5", input: five(`{"kind":"ferry.noop","priority":5}`), want: "line 3: priority 5: must be 1 (first) to 4 (last)"},
		{name: "ScheduledAtNotRFC3339", input: five(`{"kind":"ferry.noop","scheduled_at":"tomorrow 6am"}`), want: `line 3: scheduled_at "tomorrow 6am": not an RFC 3339 time`},
		{name: "MaxAttempts0", input: five(`{"kind":"ferry.noop","max_attempts":0}`), want: "line 3: max_attempts 0"},
		{name: "TagWithSpace", input: five(`{"kind":"ferry.noop","tags":["night ly"]}`), want: `line 3: tags: "night ly"`},
		{name: "QueueUppercase", input: five(`{"kind":"ferry.noop","queue":"Reports"}`), want: `line 3: queue "Reports"`},
		{name: "UniqueKeyBlank", input: five(`{"kind":"ferry.noop","unique_key":" "}`), want: "line 3: unique_key is empty"},
		{name: "HTTPRelativeURL", input: five(`{"kind":"http.request","args":{"url":"/internal/warm"}}`), want: "line 3: args: http.request: url"},
		{name: "HTTPNoArgs", input: five(`{"kind":"http.request"}`), want: "line 3: args: http.request: url"},
		{
			name:  "SeveralInvalid",
			input: strings.Join([]string{good, good, `{"kind":"nope.one"}`, good, `{"kind":"ferry.noop","priority":9}`, `oops`}, "\n"),
			want:  `line 3: unknown job kind "nope.one": not built in and no worker has registered it (2 more invalid lines); nothing inserted`,
		},
		{name: "NoFile", args: []string{"bulk"}, want: "--file is required"},
		{name: "FileMissing", args: []string{"bulk", "--file", "/no/such/jobs.jsonl"}, want: "no such file"},
		{name: "FileIsDir", args: []string{"bulk", "--file", "/"}, want: "is a directory"},
		{name: "Positional", args: []string{"bulk", "jobs.jsonl"}, want: "bulk takes no arguments"},
		{name: "BatchSize", args: []string{"bulk", "--file", "-", "--batch-size", "1"}, want: "--batch-size 1"},
		{name: "NoDatabaseURL", input: five(good), env: []string{"FERRY_LOG_FORMAT=json"}, want: "DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := env(url)
			if tt.env != nil {
				e = tt.env
			}
			args := tt.args
			if args == nil {
				args = []string{"bulk", "--file", "-"}
			}
			stdout, stderr, code := proctest.Run(t, bins(t).enqueue, e, strings.NewReader(tt.input), args...)
			require.Equal(t, 2, code, "exit code; stderr: %s", stderr)
			require.Empty(t, stdout)
			line := oneLine(t, stderr)
			require.True(t, strings.HasPrefix(line, "enqueue: "), line)
			require.Contains(t, line, tt.want)
			require.Zero(t, countJobs(t, pool), "nothing was written")
		})
	}

	t.Run("FromFile", func(t *testing.T) {
		t.Parallel()
		path := writeFile(t, "jobs.jsonl", five(`{"kind":"ferry.noop","args":[1,2]}`))
		stdout, stderr, code := enqueue(t, url, nil, "bulk", "--file", path, "--json")
		require.Equal(t, 2, code, stderr)
		require.Empty(t, stdout)
		require.JSONEq(t, `{"error": "line 3: args must be a JSON object: got a JSON array; nothing inserted", "exit_code": 2}`, oneLine(t, stderr),
			"under --json, the error is a JSON object")
		require.Zero(t, countJobs(t, pool))
	})
}

// The input is read once and copied as it is parsed: an invalid line near
// the end comes after thousands of jobs went in, and the transaction rolls
// them back. Nothing is inserted, and every invalid line is counted.
func TestBulk_InvalidLineAfterCopying(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	var in strings.Builder
	for range 30_000 {
		in.WriteString(`{"kind":"ferry.noop"}` + "\n")
	}
	in.WriteString(`{"kind":"ferry.noop","priority":9}` + "\n" + `{"kind":"ferry.noop"}` + "\n" + `oops` + "\n")
	stdout, stderr, code := enqueue(t, url, strings.NewReader(in.String()), "bulk", "--file", "-", "--batch-size", "1000")
	require.Equal(t, 2, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, "enqueue: line 30001: priority 9: must be 1 (first) to 4 (last) (1 more invalid line); nothing inserted", oneLine(t, stderr))
	require.Zero(t, countJobs(t, pool), "nothing was written")
	var used bool
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT is_called FROM river_job_id_seq").Scan(&used))
	require.True(t, used, "jobs were copied before the invalid line was read, and rolled back")
}
