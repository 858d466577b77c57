package jobs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/base/redact"
)

// HTTPRequestArgs are the args of http.request: one HTTP call, the universal
// scheduled job (warm a cache, hit a drain endpoint, ping a webhook).
//
// A 2xx answer completes the job. 408, 429, 5xx and transport errors
// (including the timeout) fail the attempt, and River retries it on its
// backoff. Any other status cancels the job at once with the status and a
// bounded snippet of the body: retrying a 404 only repeats it.
type HTTPRequestArgs struct {
	// Method defaults to GET.
	Method string `json:"method,omitempty"`
	// URL must be absolute, http or https.
	URL string `json:"url"`
	// Headers are sent as given. Don't put secrets here: args are stored in
	// river_job and shown by the admin surface; use HeadersEnv.
	Headers map[string]string `json:"headers,omitempty"`
	// HeadersEnv maps a header name to the environment variable that holds
	// its value in the worker's environment (Authorization → API_TOKEN), so
	// secrets stay out of the database.
	HeadersEnv map[string]string `json:"headers_env,omitempty"`
	// Body is sent as is.
	Body string `json:"body,omitempty"`
	// Timeout of the whole call; default 30s, at most 10m.
	Timeout Duration `json:"timeout,omitempty"`
}

// Kind implements river.JobArgs.
func (HTTPRequestArgs) Kind() string { return "http.request" }

const (
	httpDefaultTimeout = 30 * time.Second
	httpMaxTimeout     = 10 * time.Minute
	// SnippetBytes bounds how much of a response body is kept in an error or
	// in the job's output.
	SnippetBytes = 512
)

var httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// Validate checks the args; the enqueue CLI calls it so a bad request is
// refused before it is stored.
func (a HTTPRequestArgs) Validate() error {
	m := a.method()
	valid := false
	for _, v := range httpMethods {
		valid = valid || v == m
	}
	if !valid {
		return fmt.Errorf("http.request: method %q is not one of %s", a.Method, strings.Join(httpMethods, ", "))
	}
	u, err := url.Parse(a.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("http.request: url %q is not an absolute http(s) URL", redact.URL(a.URL))
	}
	if a.Timeout < 0 || time.Duration(a.Timeout) > httpMaxTimeout {
		return fmt.Errorf("http.request: timeout %s is not between 0 and %s", time.Duration(a.Timeout), httpMaxTimeout)
	}
	for h, env := range a.HeadersEnv {
		if !validHeaderName(h) {
			return fmt.Errorf("http.request: headers_env: %q is not a valid header name", h)
		}
		if env == "" {
			return fmt.Errorf("http.request: headers_env[%q] names no environment variable", h)
		}
	}
	for h, v := range a.Headers {
		if !validHeaderName(h) {
			return fmt.Errorf("http.request: headers: %q is not a valid header name", h)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("http.request: headers[%q]: value contains a line break or NUL", h)
		}
	}
	return nil
}

// validHeaderName reports whether h is an RFC 9110 token.
func validHeaderName(h string) bool {
	if h == "" {
		return false
	}
	for _, c := range []byte(h) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

func (a HTTPRequestArgs) method() string {
	if a.Method == "" {
		return http.MethodGet
	}
	return strings.ToUpper(a.Method)
}

func (a HTTPRequestArgs) timeout() time.Duration {
	if a.Timeout <= 0 {
		return httpDefaultTimeout
	}
	return time.Duration(a.Timeout)
}

// HTTPRequestOutput is recorded as the job's output on success.
type HTTPRequestOutput struct {
	Status     int    `json:"status"`
	DurationMS int64  `json:"duration_ms"`
	Body       string `json:"body,omitempty"`
}

// HTTPRequestWorker works http.request.
type HTTPRequestWorker struct {
	river.WorkerDefaults[HTTPRequestArgs]

	// Client defaults to a client shared by every http.request worker.
	Client *http.Client
}

var defaultHTTPClient = func() *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 16
	return &http.Client{Transport: tr}
}()

// Timeout gives River's job context a little more than the request's own
// timeout, so the request's timeout error (retried) wins the race.
func (w *HTTPRequestWorker) Timeout(job *river.Job[HTTPRequestArgs]) time.Duration {
	return job.Args.timeout() + 5*time.Second
}

// Work implements river.Worker.
func (w *HTTPRequestWorker) Work(ctx context.Context, job *river.Job[HTTPRequestArgs]) error {
	a := job.Args
	if err := a.Validate(); err != nil {
		return river.JobCancel(err)
	}
	timedOut := fmt.Errorf("http.request: timed out after %s", a.timeout())
	ctx, cancel := context.WithTimeoutCause(ctx, a.timeout(), timedOut)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, a.method(), a.URL, strings.NewReader(a.Body))
	if err != nil {
		return river.JobCancel(fmt.Errorf("http.request: build request: %w", err))
	}
	req.Header.Set("User-Agent", "ferry-http-request")
	for k, v := range a.Headers {
		req.Header.Set(k, v)
	}
	for k, env := range a.HeadersEnv {
		v, ok := os.LookupEnv(env)
		if !ok {
			return fmt.Errorf("http.request: header %s: environment variable %s is not set on this worker", k, env)
		}
		req.Header.Set(k, v)
	}
	req.Header.Set("Ferry-Job-Id", fmt.Sprint(job.ID))

	start := time.Now()
	client := w.Client
	if client == nil {
		client = defaultHTTPClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if context.Cause(ctx) == timedOut {
			// Our own timeout (not a shutdown): say so once, without the
			// transport's wrapping. Returned as an error, so it is retried.
			return fmt.Errorf("http.request: %s %s: timed out after %s", a.method(), redact.URL(a.URL), a.timeout())
		}
		return fmt.Errorf("http.request: %s %s: %w", a.method(), redact.URL(a.URL), redact.URLError(err))
	}
	defer resp.Body.Close()
	snippet := readSnippet(resp.Body)
	// Drain a bounded amount more so the connection can be reused.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	elapsed := time.Since(start)

	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return river.RecordOutput(ctx, HTTPRequestOutput{Status: resp.StatusCode, DurationMS: elapsed.Milliseconds(), Body: snippet})
	case retryableStatus(resp.StatusCode):
		return &StatusError{Method: a.method(), URL: redact.URL(a.URL), Status: resp.StatusCode, Body: snippet}
	default:
		return river.JobCancel(&StatusError{Method: a.method(), URL: redact.URL(a.URL), Status: resp.StatusCode, Body: snippet})
	}
}

func retryableStatus(code int) bool {
	return code == http.StatusRequestTimeout || code == http.StatusTooManyRequests || code >= 500
}

// StatusError is an HTTP answer outside 2xx.
type StatusError struct {
	Method string
	URL    string
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	msg := fmt.Sprintf("http.request: %s %s: status %d", e.Method, e.URL, e.Status)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// Retryable reports whether ferry retries this status.
func (e *StatusError) Retryable() bool { return retryableStatus(e.Status) }

func readSnippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, SnippetBytes+1))
	truncated := len(b) > SnippetBytes
	if truncated {
		b = b[:SnippetBytes]
		// Drop a rune cut in half at the end. Invalid bytes elsewhere are
		// replaced below; they are no reason to drop the rest of the snippet.
		for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	s := strings.ToValidUTF8(string(bytes.TrimSpace(b)), "?")
	if truncated {
		s += "…"
	}
	return s
}
