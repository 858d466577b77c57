package redact

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"https://app.example/x":                          "https://app.example/x",
		"https://alice:hunter2@app.example/x?token=t#f":  "https://app.example/x?…",
		"http://alice@app.example:8080/hook?":            "http://app.example:8080/hook?",
		"ftp://user:hunter2@app.example/x?token=t0ken":   "ftp://app.example/x?…",
		"https://api.telegram.org/bot123:abc/getUpdates": "https://api.telegram.org/bot123:abc/getUpdates",
		"/relative/path?k=v":                             "/relative/path?…",
		"":                                               "",
		"http://[::1":                                    "(unparsable url)",
		"https://u:p w@h/x":                              "(unparsable url)",
		"alice:hunter2@app.example/x":                    "alice:…",
		"mailto:ops@app.example":                         "mailto:…",
	} {
		require.Equal(t, want, URL(in), in)
	}
}

func TestURLError(t *testing.T) {
	t.Parallel()

	t.Run("Stripped", func(t *testing.T) {
		t.Parallel()
		cause := errors.New("connection refused")
		err := &url.Error{Op: "Get", URL: "https://u:hunter2@h/x?token=t0ken", Err: cause}
		require.Equal(t, cause, URLError(err))
		require.Equal(t, cause, URLError(fmt.Errorf("request: %w", err)), "what wrapped it goes too")
	})

	t.Run("FromClient", func(t *testing.T) {
		t.Parallel()
		req, err := http.NewRequest(http.MethodGet, "http://u:hunter2@127.0.0.1:1/x?token=t0ken", nil)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err = http.DefaultClient.Do(req.WithContext(ctx))
		require.Error(t, err)
		require.Contains(t, err.Error(), "t0ken", "a *url.Error quotes the URL")
		got := URLError(err)
		require.NotContains(t, got.Error(), "t0ken")
		require.NotContains(t, got.Error(), "hunter2")
		require.ErrorIs(t, got, context.Canceled)
	})

	t.Run("Other", func(t *testing.T) {
		t.Parallel()
		err := errors.New("not a url error")
		require.Equal(t, err, URLError(err))
		require.NoError(t, URLError(nil))
	})
}
