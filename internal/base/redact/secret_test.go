package redact

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const testSecret = "123456:AA/bb cc+dd"

func TestSecret(t *testing.T) {
	t.Parallel()

	t.Run("EveryForm", func(t *testing.T) {
		t.Parallel()
		s := Secret(testSecret, "bot")
		in := strings.Join([]string{
			"bot" + testSecret,
			testSecret,
			"123456:AA%2Fbb%20cc+dd",   // url.PathEscape
			"123456%3AAA%2Fbb+cc%2Bdd", // url.QueryEscape
			"https://api.example/bot123456:AA%2Fbb%20cc+dd/getMe?chat=123456%3AAA%2Fbb+cc%2Bdd",
		}, " | ")
		require.Equal(t, "bot[redacted] | [redacted] | [redacted] | [redacted] | https://api.example/bot[redacted]/getMe?chat=[redacted]", s.Replace(in))
	})

	t.Run("Prefixes", func(t *testing.T) {
		t.Parallel()
		s := Secret("tok", "bot", "key=")
		require.Equal(t, "bot[redacted] key=[redacted] x[redacted]", s.Replace("bottok key=tok xtok"))
		require.Equal(t, "[redacted]", Secret("tok").Replace("tok"))
	})

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		// Scrubs nothing (and does not loop on empty matches).
		require.Equal(t, "abc", Secret("").Replace("abc"))
		require.Equal(t, "abc", Secret("", "bot").Replace("abc"))
		var nilScrubber *Scrubber
		require.Equal(t, "abc", nilScrubber.Replace("abc"))
		require.NoError(t, nilScrubber.Err(nil))
	})
}

func TestScrubber_Err(t *testing.T) {
	t.Parallel()
	s := Secret(testSecret, "bot")

	t.Run("Nil", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, s.Err(nil))
		require.NoError(t, Secret("").Err(nil))
	})

	t.Run("CleanKeptAsIs", func(t *testing.T) {
		t.Parallel()
		err := fmt.Errorf("send: %w", context.Canceled)
		require.Same(t, err, s.Err(err))
	})

	t.Run("Scrubbed", func(t *testing.T) {
		t.Parallel()
		inner := errors.New("dial bot" + testSecret)
		got := s.Err(fmt.Errorf("send: %w", inner))
		require.Equal(t, "send: dial bot[redacted]", got.Error())
		require.NotErrorIs(t, got, inner, "err's chain holds the secret")
		require.NoError(t, errors.Unwrap(got))
	})

	t.Run("ContextKept", func(t *testing.T) {
		t.Parallel()
		for _, sentinel := range []error{context.Canceled, context.DeadlineExceeded} {
			got := s.Err(fmt.Errorf("call %s: %w", testSecret, sentinel))
			require.Equal(t, "call [redacted]: "+sentinel.Error(), got.Error())
			require.ErrorIs(t, got, sentinel)
			require.Equal(t, sentinel, errors.Unwrap(got))
		}
	})
}
