package ferrycli

import (
	"testing"

	"github.com/stretchr/testify/require"
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
	require.Equal(t, []string{"kind", "args", "queue", "priority", "scheduled_at", "max_attempts", "unique_key", "tags"}, bulkFields)
}
