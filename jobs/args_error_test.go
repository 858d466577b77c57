package jobs_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/jobs"
)

func TestParseRaw_ArgsError(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		kind, raw, msg string
		syntax         bool // wraps a *json.SyntaxError
	}{
		"TooLarge":       {kind: "acme.report", raw: `{"a":"` + strings.Repeat("x", jobs.MaxArgsBytes) + `"}`, msg: "args are 65544 bytes, over the 65536 byte limit"},
		"Array":          {kind: "acme.report", raw: `[1]`, msg: "args must be a JSON object: got a JSON array"},
		"Null":           {kind: "ferry.noop", raw: ` null `, msg: "args must be a JSON object: got null"},
		"Syntax":         {kind: "acme.report", raw: `{"a":1}}`, msg: "args must be a JSON object: invalid character '}' after top-level value", syntax: true},
		"CutShort":       {kind: "ferry.noop", raw: `{"a":`, msg: "args must be a JSON object: unexpected end of JSON input", syntax: true},
		"UnknownField":   {kind: "ferry.noop", raw: `{"slep":"1s"}`, msg: `args do not fit ferry.noop: json: unknown field "slep"`},
		"WrongFieldType": {kind: "http.request", raw: `{"url":1}`, msg: "args do not fit http.request: json: cannot unmarshal number into Go struct field HTTPRequestArgs.url of type string"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := jobs.ParseRaw(tc.kind, []byte(tc.raw))
			argsErr, ok := errors.AsType[*jobs.ArgsError](err)
			require.True(t, ok, "%T: %v", err, err)
			require.Equal(t, tc.kind, argsErr.Kind)
			require.EqualError(t, err, tc.msg, "the message is the cause's, unchanged")
			_, isSyntax := errors.AsType[*json.SyntaxError](err)
			require.Equal(t, tc.syntax, isSyntax)
		})
	}

	t.Run("WrongFieldTypeWrapsTheDecoderError", func(t *testing.T) {
		t.Parallel()
		_, err := jobs.ParseRaw("http.request", []byte(`{"url":1}`))
		_, ok := errors.AsType[*json.UnmarshalTypeError](err)
		require.True(t, ok)
	})

	t.Run("ValidateErrorIsNotOne", func(t *testing.T) {
		t.Parallel()
		_, err := jobs.ParseRaw("http.request", []byte(`{"url":"/warm"}`))
		require.EqualError(t, err, `http.request: url "/warm" is not an absolute http(s) URL`)
		_, ok := errors.AsType[*jobs.ArgsError](err)
		require.False(t, ok)
	})

	t.Run("ValidArgsNoError", func(t *testing.T) {
		t.Parallel()
		_, err := jobs.ParseRaw("ferry.noop", []byte(`{"sleep":"1s"}`))
		require.NoError(t, err)
	})
}
