package seal

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCanonical_SameAsDecoded: canonical gives, byte for byte, what the
// first form of it gave (decoding into Go values with UseNumber, kept
// here as decodedCanonical), so that seals made by earlier builds verify.
func TestCanonical_SameAsDecoded(t *testing.T) {
	t.Parallel()
	docs := []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.50`, `15e-1`, `1E+2`, `-12345678901234567890`,
		`"plain"`, `"é <&> \u2028 \"q\" \\ \n \t \u0001"`, `"\ud83d\ude00"`,
		`{"b": 1, "a": [1, 2.0, {"z": null, "y": "x"}], "c": {"": true}}`,
		`{"dup": 1, "dup": 2, "a": 0, "dup": {"k": [false]}}`,
		`{"n": 1.5000001, "big": 1e300, "small": -2.5e-300, "s": "<script>"}`,
		`{"clé": "valeur", "Z": 1, "a": 2, "_": 3, "10": 4, "9": 5}`,
		` { "spaced" : [ 1 , 2 ] } `,
		`[[], {}, [[[]]], {"a": {}}]`,
	}
	for i, doc := range docs {
		want, werr := decodedCanonical([]byte(doc))
		got, gerr := canonical([]byte(doc))
		require.NoError(t, werr, "doc %d", i)
		require.NoError(t, gerr, "doc %d", i)
		require.Equal(t, string(want), string(got), "doc %d: %s", i, doc)
	}
	for _, bad := range []string{``, `{`, `{"a": 1} x`, `[1,]`, `{"a" 1}`, `1e99999999999`} {
		_, err := canonical([]byte(bad))
		require.Error(t, err, "%q", bad)
	}
}

func decodedCanonical(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return appendDecoded(nil, v)
}

func appendDecoded(out []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(out, "null"...), nil
	case bool:
		return strconv.AppendBool(out, v), nil
	case string:
		b, err := json.Marshal(v)
		return append(out, b...), err
	case json.Number:
		return appendNumber(out, string(v))
	case []any:
		out = append(out, '[')
		for i, e := range v {
			if i > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = appendDecoded(out, e); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out = append(out, '{')
		for i, k := range keys {
			if i > 0 {
				out = append(out, ',')
			}
			b, err := json.Marshal(k)
			if err != nil {
				return nil, err
			}
			out = append(append(out, b...), ':')
			if out, err = appendDecoded(out, v[k]); err != nil {
				return nil, err
			}
		}
		return append(out, '}'), nil
	}
	return nil, fmt.Errorf("unexpected JSON value %T", v)
}
