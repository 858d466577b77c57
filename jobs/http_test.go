package jobs_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// newServer starts an HTTP server answering every request with handler,
// closed when the test ends.
func newServer(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

// statusServer answers every request with status and body.
func statusServer(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	return newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// slowServer answers after wait, or gives up when the client goes away.
func slowServer(t *testing.T, wait time.Duration) *httptest.Server {
	t.Helper()
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(wait):
			w.WriteHeader(http.StatusOK)
		case <-r.Context().Done():
		}
	})
}

// work calls the worker directly, outside River (so a 2xx answer, which
// records output through River's work context, is tested end to end instead).
func work(t *testing.T, srv *httptest.Server, args jobs.HTTPRequestArgs) error {
	t.Helper()
	w := &jobs.HTTPRequestWorker{}
	if srv != nil {
		w.Client = srv.Client()
	}
	return w.Work(t.Context(), &river.Job[jobs.HTTPRequestArgs]{JobRow: &rivertype.JobRow{ID: 1}, Args: args})
}

func requireCancel(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, &rivertype.JobCancelError{}, "want a cancel (no retry), got %v", err)
}

func requireRetry(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.NotErrorIs(t, err, &rivertype.JobCancelError{}, "want a retried error, got a cancel: %v", err)
}

func requireStatusError(t *testing.T, err error, status int) *jobs.StatusError {
	t.Helper()
	var se *jobs.StatusError
	require.ErrorAs(t, err, &se)
	require.Equal(t, status, se.Status)
	return se
}

func TestHTTPRequestArgs_Validate(t *testing.T) {
	t.Parallel()

	valid := func() jobs.HTTPRequestArgs {
		return jobs.HTTPRequestArgs{URL: "https://app.example/warm"}
	}

	t.Run("Valid", func(t *testing.T) {
		t.Parallel()
		for _, args := range []jobs.HTTPRequestArgs{
			valid(),
			{Method: "post", URL: "http://app.example:8080/drain?now=1", Body: "{}"},
			{Method: "DELETE", URL: "https://app.example/x", Timeout: jobs.Duration(10 * time.Minute)},
			{URL: "https://app.example/x", HeadersEnv: map[string]string{"Authorization": "API_TOKEN"}},
		} {
			require.NoError(t, args.Validate(), "%+v", args)
		}
	})

	for name, tc := range map[string]struct {
		mutate func(*jobs.HTTPRequestArgs)
		want   string
	}{
		"BadMethod":       {func(a *jobs.HTTPRequestArgs) { a.Method = "FETCH" }, `method "FETCH"`},
		"RelativeURL":     {func(a *jobs.HTTPRequestArgs) { a.URL = "/warm" }, "not an absolute http(s) URL"},
		"NoURL":           {func(a *jobs.HTTPRequestArgs) { a.URL = "" }, "not an absolute http(s) URL"},
		"NoHost":          {func(a *jobs.HTTPRequestArgs) { a.URL = "http:///warm" }, "not an absolute http(s) URL"},
		"OtherScheme":     {func(a *jobs.HTTPRequestArgs) { a.URL = "ftp://app.example/warm" }, "not an absolute http(s) URL"},
		"UnparsableURL":   {func(a *jobs.HTTPRequestArgs) { a.URL = "http://[::1" }, "not an absolute http(s) URL"},
		"TimeoutOver10m":  {func(a *jobs.HTTPRequestArgs) { a.Timeout = jobs.Duration(10*time.Minute + time.Second) }, "timeout 10m1s"},
		"NegativeTimeout": {func(a *jobs.HTTPRequestArgs) { a.Timeout = jobs.Duration(-time.Second) }, "timeout -1s"},
		"BadHeaderName": {
			func(a *jobs.HTTPRequestArgs) { a.Headers = map[string]string{"X Bad": "v"} },
			`headers: "X Bad" is not a valid header name`,
		},
		"HeaderValueLineBreak": {
			func(a *jobs.HTTPRequestArgs) { a.Headers = map[string]string{"X-Ok": "v\r\nX-Injected: 1"} },
			`headers["X-Ok"]: value contains a line break`,
		},
		"BadHeadersEnvName": {
			func(a *jobs.HTTPRequestArgs) { a.HeadersEnv = map[string]string{"": "TOKEN"} },
			`headers_env: "" is not a valid header name`,
		},
		"HeadersEnvNamesNothing": {
			func(a *jobs.HTTPRequestArgs) { a.HeadersEnv = map[string]string{"Authorization": ""} },
			`headers_env["Authorization"] names no environment variable`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			args := valid()
			tc.mutate(&args)
			err := args.Validate()
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}

	t.Run("CredentialsRedacted", func(t *testing.T) {
		t.Parallel()
		args := jobs.HTTPRequestArgs{URL: "ftp://user:hunter2@app.example/x?token=t0ken"}
		err := args.Validate()
		require.Error(t, err)
		require.NotContains(t, err.Error(), "hunter2")
		require.NotContains(t, err.Error(), "t0ken")
	})
}

func TestHTTPRequestWorker_Timeout(t *testing.T) {
	t.Parallel()
	w := &jobs.HTTPRequestWorker{}
	job := func(args jobs.HTTPRequestArgs) *river.Job[jobs.HTTPRequestArgs] {
		return &river.Job[jobs.HTTPRequestArgs]{JobRow: &rivertype.JobRow{ID: 1}, Args: args}
	}

	t.Run("Default", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 35*time.Second, w.Timeout(job(jobs.HTTPRequestArgs{})))
	})

	t.Run("FromArgs", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 5*time.Second+200*time.Millisecond, w.Timeout(job(jobs.HTTPRequestArgs{Timeout: jobs.Duration(200 * time.Millisecond)})))
	})
}

// TestHTTPRequestWorker_Work calls Work directly: how answers and failures map
// to retry or cancel.
func TestHTTPRequestWorker_Work(t *testing.T) {
	t.Parallel()

	for _, status := range []int{http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
		t.Run(fmt.Sprintf("Status%dRetried", status), func(t *testing.T) {
			t.Parallel()
			srv := statusServer(t, status, "try later")
			err := work(t, srv, jobs.HTTPRequestArgs{URL: srv.URL + "/x"})
			requireRetry(t, err)
			se := requireStatusError(t, err, status)
			require.True(t, se.Retryable())
			require.Equal(t, "GET", se.Method)
			require.Equal(t, "try later", se.Body)
		})
	}

	for _, status := range []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound, http.StatusConflict, http.StatusNotModified} {
		t.Run(fmt.Sprintf("Status%dCancelled", status), func(t *testing.T) {
			t.Parallel()
			srv := statusServer(t, status, "")
			err := work(t, srv, jobs.HTTPRequestArgs{URL: srv.URL + "/x"})
			requireCancel(t, err)
			se := requireStatusError(t, err, status)
			require.False(t, se.Retryable())
		})
	}

	t.Run("RequestAsGiven", func(t *testing.T) {
		t.Parallel()
		type seen struct {
			method, path, body string
			header             http.Header
		}
		got := make(chan seen, 1)
		srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			got <- seen{r.Method, r.URL.Path, string(b), r.Header.Clone()}
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		err := work(t, srv, jobs.HTTPRequestArgs{
			Method:  "put",
			URL:     srv.URL + "/drain",
			Headers: map[string]string{"X-Drain": "all", "Content-Type": "application/json"},
			Body:    `{"all":true}`,
		})
		requireStatusError(t, err, http.StatusServiceUnavailable)
		s := <-got
		require.Equal(t, "PUT", s.method)
		require.Equal(t, "/drain", s.path)
		require.Equal(t, `{"all":true}`, s.body)
		require.Equal(t, "all", s.header.Get("X-Drain"))
		require.Equal(t, "application/json", s.header.Get("Content-Type"))
		require.Equal(t, "ferry-http-request", s.header.Get("User-Agent"))
		require.Equal(t, "1", s.header.Get("Ferry-Job-Id"))
	})

	t.Run("TimeoutRetried", func(t *testing.T) {
		t.Parallel()
		// The server would answer in an hour: only the job's timeout ends
		// the call (the bound below is a watchdog, not a measurement).
		srv := slowServer(t, time.Hour)
		start := time.Now()
		err := work(t, srv, jobs.HTTPRequestArgs{URL: srv.URL, Timeout: jobs.Duration(200 * time.Millisecond)})
		requireRetry(t, err)
		require.Contains(t, err.Error(), "timed out after 200ms")
		require.Equal(t, 1, strings.Count(err.Error(), "http.request:"), "one prefix: %v", err)
		require.Less(t, time.Since(start), time.Minute)
	})

	t.Run("TransportErrorRetried", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.NotFoundHandler())
		url := srv.URL
		srv.Close()
		err := work(t, nil, jobs.HTTPRequestArgs{URL: url + "/x"})
		requireRetry(t, err)
		require.Contains(t, err.Error(), "http.request: GET "+url+"/x: ")
	})

	t.Run("InvalidArgsCancelled", func(t *testing.T) {
		t.Parallel()
		err := work(t, nil, jobs.HTTPRequestArgs{URL: "/relative"})
		requireCancel(t, err)
		require.Contains(t, err.Error(), "not an absolute http(s) URL")
	})

	t.Run("HeadersEnvUnsetRetried", func(t *testing.T) {
		t.Parallel()
		srv := statusServer(t, http.StatusOK, "")
		err := work(t, srv, jobs.HTTPRequestArgs{URL: srv.URL, HeadersEnv: map[string]string{"Authorization": "FERRY_TEST_SURELY_UNSET_VAR"}})
		requireRetry(t, err)
		require.Contains(t, err.Error(), "environment variable FERRY_TEST_SURELY_UNSET_VAR is not set")
	})

	t.Run("SnippetBounded", func(t *testing.T) {
		t.Parallel()
		const ellipsis = "…"
		for name, tc := range map[string]struct {
			body       string
			wantPrefix string
			truncated  bool
		}{
			"Short":        {"  not found\n", "not found", false},
			"ExactlyLimit": {strings.Repeat("x", jobs.SnippetBytes), strings.Repeat("x", jobs.SnippetBytes), false},
			"Long":         {strings.Repeat("x", 10*jobs.SnippetBytes), strings.Repeat("x", jobs.SnippetBytes), true},
			// 3-byte runes: the limit falls inside one, which is dropped whole.
			"LongMultibyte": {strings.Repeat("€", jobs.SnippetBytes), strings.Repeat("€", jobs.SnippetBytes/3), true},
			// A stray Latin-1 byte is replaced; the rest of the snippet stays.
			"LongNotUTF8": {"caf\xe9 " + strings.Repeat("a", 2*jobs.SnippetBytes), "caf? aaaa", true},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := statusServer(t, http.StatusInternalServerError, tc.body)
				se := requireStatusError(t, work(t, srv, jobs.HTTPRequestArgs{URL: srv.URL}), http.StatusInternalServerError)
				require.True(t, utf8.ValidString(se.Body))
				require.LessOrEqual(t, len(se.Body), jobs.SnippetBytes+len(ellipsis))
				require.True(t, strings.HasPrefix(se.Body, tc.wantPrefix), "snippet %q", se.Body)
				require.Equal(t, tc.truncated, strings.HasSuffix(se.Body, ellipsis), "snippet %q", se.Body)
				if !tc.truncated {
					require.Equal(t, tc.wantPrefix, se.Body)
				}
			})
		}
	})

	t.Run("URLRedacted", func(t *testing.T) {
		t.Parallel()
		const secretUser, secretPass, secretQuery = "alice", "hunter2", "t0ken"
		withSecrets := func(base string) string {
			return strings.Replace(base, "http://", "http://"+secretUser+":"+secretPass+"@", 1) + "/hook?token=" + secretQuery + "#frag"
		}
		requireRedacted := func(t *testing.T, err error) {
			t.Helper()
			require.Error(t, err)
			for _, s := range []string{secretPass, secretQuery, secretUser + ":"} {
				require.NotContains(t, err.Error(), s)
			}
			require.Contains(t, err.Error(), "/hook?…")
		}

		t.Run("StatusError", func(t *testing.T) {
			t.Parallel()
			srv := statusServer(t, http.StatusInternalServerError, "")
			requireRedacted(t, work(t, srv, jobs.HTTPRequestArgs{URL: withSecrets(srv.URL)}))
		})

		t.Run("Cancelled", func(t *testing.T) {
			t.Parallel()
			srv := statusServer(t, http.StatusForbidden, "")
			err := work(t, srv, jobs.HTTPRequestArgs{URL: withSecrets(srv.URL)})
			requireCancel(t, err)
			requireRedacted(t, err)
		})

		t.Run("TransportError", func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.NotFoundHandler())
			url := srv.URL
			srv.Close()
			requireRedacted(t, work(t, nil, jobs.HTTPRequestArgs{URL: withSecrets(url)}))
		})

		t.Run("Timeout", func(t *testing.T) {
			t.Parallel()
			srv := slowServer(t, 5*time.Second)
			err := work(t, srv, jobs.HTTPRequestArgs{URL: withSecrets(srv.URL), Timeout: jobs.Duration(100 * time.Millisecond)})
			require.Error(t, err)
			for _, s := range []string{secretPass, secretQuery} {
				require.NotContains(t, err.Error(), s)
			}
		})
	})
}

// TestHTTPRequestWorker_HeadersEnv sets environment variables, so it does not
// run in parallel.
func TestHTTPRequestWorker_HeadersEnv(t *testing.T) {
	const secret = "s3cret-token-value"
	t.Setenv("FERRY_TEST_API_TOKEN", "Bearer "+secret)

	var (
		mu   sync.Mutex
		auth []string
	)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "down for maintenance")
	})

	t.Run("HeaderFromEnv", func(t *testing.T) {
		err := work(t, srv, jobs.HTTPRequestArgs{
			URL:        srv.URL,
			Headers:    map[string]string{"Authorization": "overridden"},
			HeadersEnv: map[string]string{"Authorization": "FERRY_TEST_API_TOKEN"},
		})
		requireRetry(t, err)
		requireStatusError(t, err, http.StatusServiceUnavailable)
		require.NotContains(t, err.Error(), secret)
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"Bearer " + secret}, auth)
	})

	t.Run("SecretInNoError", func(t *testing.T) {
		closed := httptest.NewServer(http.NotFoundHandler())
		closedURL := closed.URL
		closed.Close()
		for _, args := range []jobs.HTTPRequestArgs{
			{URL: closedURL, HeadersEnv: map[string]string{"Authorization": "FERRY_TEST_API_TOKEN"}},
			{URL: srv.URL, Method: "BREW", HeadersEnv: map[string]string{"Authorization": "FERRY_TEST_API_TOKEN"}},
			{URL: srv.URL, Timeout: jobs.Duration(time.Hour), HeadersEnv: map[string]string{"Authorization": "FERRY_TEST_API_TOKEN"}},
			{URL: srv.URL, HeadersEnv: map[string]string{"Authorization": "FERRY_TEST_API_TOKEN", "X-Other": "FERRY_TEST_UNSET_VAR"}},
		} {
			err := work(t, srv, args)
			require.Error(t, err)
			require.NotContains(t, err.Error(), secret)
			if verr := args.Validate(); verr != nil {
				require.NotContains(t, verr.Error(), secret)
			}
		}
	})
}

// TestHTTPRequestWorker_EndToEnd works http.request jobs through a real River
// client and checks the state each job is left in.
func TestHTTPRequestWorker_EndToEnd(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		client *clientBundle
	}

	setup := func(t *testing.T, srv *httptest.Server) *testBundle {
		t.Helper()
		workers := river.NewWorkers()
		river.AddWorker(workers, &jobs.HTTPRequestWorker{Client: srv.Client()})
		return &testBundle{client: startClient(t, pgtest.Pool(t), workers)}
	}

	requireRetryable := func(t *testing.T, ev *river.Event, job *rivertype.JobRow, wantErr string) {
		t.Helper()
		require.Equal(t, river.EventKindJobFailed, ev.Kind)
		require.Equal(t, rivertype.JobStateRetryable, job.State)
		require.Equal(t, 1, job.Attempt)
		require.Len(t, job.Errors, 1)
		require.Equal(t, 1, job.Errors[0].Attempt)
		require.Contains(t, job.Errors[0].Error, wantErr)
		require.Nil(t, job.FinalizedAt)
		require.True(t, job.ScheduledAt.After(time.Now()), "next attempt is in the future")
	}

	t.Run("OKCompletes", func(t *testing.T) {
		t.Parallel()
		srv := statusServer(t, http.StatusOK, "warmed 42 entries\n")
		bundle := setup(t, srv)

		ev, job := bundle.client.run(t, jobs.HTTPRequestArgs{URL: srv.URL + "/warm"})
		require.Equal(t, river.EventKindJobCompleted, ev.Kind)
		require.Equal(t, rivertype.JobStateCompleted, job.State)
		require.Empty(t, job.Errors)

		var out jobs.HTTPRequestOutput
		require.NoError(t, json.Unmarshal(job.Output(), &out), "output %s", job.Output())
		require.Equal(t, http.StatusOK, out.Status)
		require.Equal(t, "warmed 42 entries", out.Body)
		require.GreaterOrEqual(t, out.DurationMS, int64(0))
	})

	t.Run("NotFoundCancels", func(t *testing.T) {
		t.Parallel()
		srv := statusServer(t, http.StatusNotFound, "no such page")
		bundle := setup(t, srv)

		ev, job := bundle.client.run(t, jobs.HTTPRequestArgs{URL: srv.URL + "/gone"})
		require.Equal(t, river.EventKindJobCancelled, ev.Kind)
		require.Equal(t, rivertype.JobStateCancelled, job.State)
		require.Equal(t, 1, job.Attempt)
		require.NotNil(t, job.FinalizedAt)
		require.Len(t, job.Errors, 1)
		require.Contains(t, job.Errors[0].Error, "status 404: no such page")
	})

	t.Run("ServerErrorRetryable", func(t *testing.T) {
		t.Parallel()
		srv := statusServer(t, http.StatusInternalServerError, "boom")
		bundle := setup(t, srv)

		ev, job := bundle.client.run(t, jobs.HTTPRequestArgs{URL: srv.URL})
		requireRetryable(t, ev, job, "status 500: boom")
	})

	t.Run("TooManyRequestsRetryable", func(t *testing.T) {
		t.Parallel()
		srv := statusServer(t, http.StatusTooManyRequests, "slow down")
		bundle := setup(t, srv)

		ev, job := bundle.client.run(t, jobs.HTTPRequestArgs{URL: srv.URL})
		requireRetryable(t, ev, job, "status 429: slow down")
	})

	t.Run("TimeoutRetryable", func(t *testing.T) {
		t.Parallel()
		srv := slowServer(t, 5*time.Second)
		bundle := setup(t, srv)

		ev, job := bundle.client.run(t, jobs.HTTPRequestArgs{URL: srv.URL, Timeout: jobs.Duration(200 * time.Millisecond)})
		requireRetryable(t, ev, job, "timed out after 200ms")
	})
}
