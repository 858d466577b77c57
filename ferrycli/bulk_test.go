package ferrycli

import (
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/jobs"
)

func TestDecodeLine(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		line    string
		unknown string // the unknown field reported, if any
	}{
		"known fields":                {line: `{"kind":"ferry.noop","args":{},"queue":"q","priority":2,"tags":["abc"]}`},
		"case-insensitive, as json":   {line: `{"KIND":"ferry.noop","Unique_Key":"k"}`},
		"a null and a repeated key":   {line: `{"kind":"a","queue":null,"kind":"b"}`},
		"unknown field":               {line: `{"kind":"ferry.noop","shceduled_at":"2030-01-01T00:00:00Z"}`, unknown: "shceduled_at"},
		"first of two unknown fields": {line: `{"zz":[1,{"q":2}],"kind":"a","yy":1}`, unknown: "zz"},
		"escaped key":                 {line: `{"kind":"a","x\u00e9":1}`, unknown: "x\u00e9"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var l bulkLine
			err := decodeLine([]byte(tc.line), &l)
			if tc.unknown == "" {
				require.NoError(t, err)
				require.NotEmpty(t, l.Kind)
				return
			}
			var uf *unknownFieldError
			require.ErrorAs(t, err, &uf)
			require.Equal(t, tc.unknown, uf.key)
			require.Equal(t, uf.Error(), describeLineError(err), "reported as is, with the fields")
			for _, f := range bulkFields {
				require.Contains(t, uf.Error(), f)
			}
		})
	}
}

func TestBulkFields(t *testing.T) {
	t.Parallel()
	require.Equal(t, []string{"kind", "args", "queue", "priority", "scheduled_at", "max_attempts", "unique_key", "tags", "debounce"}, bulkFields)
}

// A line's args are refused with the reason ParseRaw gives, which names the
// args, or, for a kind's own validation, after "args: ".
func TestBulk_parseArgs(t *testing.T) {
	t.Parallel()
	b := &bulk{kinds: map[string]*kindInfo{}}
	for _, k := range jobs.Builtin() {
		b.kinds[k.Name] = &kindInfo{known: jobs.Known{Name: k.Name, Queue: k.Queue}, opts: &river.InsertOpts{Queue: k.Queue, Priority: 1}}
	}
	for name, tc := range map[string]struct{ line, want string }{
		"NotAnObject":  {`{"kind":"ferry.noop","args":[1,2]}`, "line 3: args must be a JSON object: got a JSON array"},
		"UnknownField": {`{"kind":"ferry.noop","args":{"slep":"1s"}}`, `line 3: args do not fit ferry.noop: json: unknown field "slep"`},
		"Validation":   {`{"kind":"http.request","args":{"url":"/warm"}}`, `line 3: args: http.request: url "/warm" is not an absolute http(s) URL`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := b.parse(t.Context(), 3, []byte(tc.line))
			var le *lineError
			require.ErrorAs(t, err, &le)
			require.EqualError(t, err, tc.want)
		})
	}
	_, err := b.parse(t.Context(), 1, []byte(`{"kind":"http.request","args":{"url":"http://app.example/warm"}}`))
	require.NoError(t, err)
}
