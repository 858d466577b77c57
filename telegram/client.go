package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ferryq/ferry/internal/base/redact"
)

// DefaultAPIURL is the public Bot API server (FERRY_TELEGRAM_API_URL
// overrides it).
const DefaultAPIURL = "https://api.telegram.org"

const (
	// pollSlack is how much longer than the long-poll timeout sent to
	// Telegram the HTTP request may take before it is a transport error.
	pollSlack = 10 * time.Second
	// sendTimeout bounds a sendMessage call (less when ctx says so).
	sendTimeout = 30 * time.Second
	// maxResponseBytes bounds how much of an answer is read: 100 updates of
	// a few KiB each is the normal batch; this leaves room for large ones.
	maxResponseBytes = 64 << 20
	// maxDescription bounds an error description kept in an APIError.
	maxDescription = 512
)

// Error kinds, as APIError.Kind and ErrorKind report them (and the kind
// label of ferry_telegram_errors_total).
const (
	KindUnauthorized = "unauthorized" // 401: the token is wrong or revoked
	KindConflict     = "conflict"     // 409: another getUpdates consumer, or a webhook is set
	KindRateLimited  = "rate_limited" // 429: wait RetryAfter
	KindServer       = "server"       // 5xx, or an answer that is not the Bot API's JSON
	KindBadRequest   = "bad_request"  // any other 4xx
	KindTransport    = "transport"    // no answer: connection, TLS, timeout
)

// APIError is an answer of the Bot API that is not ok. Its fields and its
// message never contain the bot's token: a description that echoes it is
// scrubbed.
type APIError struct {
	// Method is the Bot API method called (getUpdates, sendMessage).
	Method string
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// ErrorCode is the answer's error_code (usually StatusCode); 0 when the
	// body was not the Bot API's JSON.
	ErrorCode int
	// Description is the answer's description, or a short snippet of a body
	// that was not JSON.
	Description string
	// RetryAfter is how long Telegram asks to wait (429), from
	// parameters.retry_after or the Retry-After header.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	code := e.ErrorCode
	if code == 0 {
		code = e.StatusCode
	}
	var b strings.Builder
	fmt.Fprintf(&b, "telegram: %s: %s (%d)", e.Method, e.Kind(), code)
	if e.Description != "" {
		b.WriteString(": ")
		b.WriteString(e.Description)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	return b.String()
}

// Kind classifies the error: KindUnauthorized, KindConflict,
// KindRateLimited, KindServer or KindBadRequest.
func (e *APIError) Kind() string {
	code := e.ErrorCode
	if code == 0 {
		code = e.StatusCode
	}
	switch {
	case code == http.StatusUnauthorized:
		return KindUnauthorized
	case code == http.StatusConflict:
		return KindConflict
	case code == http.StatusTooManyRequests:
		return KindRateLimited
	case code >= 500, code < 400:
		// A 2xx or 3xx that is not ok is not the Bot API speaking (a proxy,
		// a captive portal): the server side is at fault.
		return KindServer
	default:
		return KindBadRequest
	}
}

// TransportError is a call that got no answer: the connection failed, TLS
// failed, or the request timed out. Its message never contains the URL (and
// so never the token); Unwrap gives the cause without the URL, so
// errors.Is(err, context.Canceled) and the like work.
type TransportError struct {
	// Method is the Bot API method called.
	Method string
	err    error
}

func (e *TransportError) Error() string { return "telegram: " + e.Method + ": " + e.err.Error() }

// Unwrap returns the cause.
func (e *TransportError) Unwrap() error { return e.err }

// Kind is KindTransport.
func (e *TransportError) Kind() string { return KindTransport }

// ErrorKind returns the kind of an error of the client (see the Kind
// constants), "canceled" for a context's end, or "" for nil or an error of
// no known kind.
func ErrorKind(err error) string {
	var apiErr *APIError
	var trErr *TransportError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.As(err, &apiErr):
		return apiErr.Kind()
	case errors.As(err, &trErr):
		return KindTransport
	}
	return ""
}

// Client calls the Bot API for one bot: the two methods ferry needs,
// getUpdates and sendMessage. It is safe for concurrent use. Its errors
// never contain the token; neither does its String form.
type Client struct {
	apiURL string
	token  string
	http   *http.Client
	scrub  *redact.Scrubber
}

// NewClient returns a client of the bot whose token is token, on the Bot API
// server at apiURL (DefaultAPIURL when empty). httpClient defaults to a
// client of its own; redirects are never followed (the token is in the
// path). Requests are bounded by their context, so httpClient's own Timeout
// must exceed the long-poll timeout plus 10s, or be 0.
func NewClient(apiURL, token string, httpClient *http.Client) *Client {
	if apiURL == "" {
		apiURL = DefaultAPIURL
	}
	var hc http.Client
	if httpClient != nil {
		hc = *httpClient
	}
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{
		apiURL: strings.TrimRight(apiURL, "/"),
		token:  token,
		http:   &hc,
		scrub:  redact.Secret(token, "bot"),
	}
}

// String names the client without its token.
func (c *Client) String() string { return "telegram.Client(" + redact.URL(c.apiURL) + ")" }

// GoString is String, so %#v does not print the token either.
func (c *Client) GoString() string { return c.String() }

// redact scrubs the token from s.
func (c *Client) redact(s string) string { return c.scrub.Replace(s) }

// redactErr returns err with the token scrubbed from its message (see
// redact.Scrubber.Err: err itself when clean, else an error that unwraps
// only to a context sentinel err wraps).
func (c *Client) redactErr(err error) error { return c.scrub.Err(err) }

// getUpdatesRequest is the body of getUpdates.
type getUpdatesRequest struct {
	Offset         int64    `json:"offset,omitempty"`
	Timeout        int64    `json:"timeout"`
	AllowedUpdates []string `json:"allowed_updates,omitempty"`
}

// GetUpdates long-polls for updates from offset, waiting up to timeout
// (whole seconds; 0 is a short poll) for one to arrive, and returns each
// update's JSON as sent: nothing in an update can fail the batch. Calling
// it with an offset above an update's id acknowledges that update to
// Telegram, which then never sends it again. allowed nil keeps the bot's
// previous setting (Telegram remembers it); an empty non-nil slice is not
// sent either.
//
// The HTTP request is bounded by timeout plus 10s and by ctx: cancelling
// ctx ends an in-flight long poll at once.
func (c *Client) GetUpdates(ctx context.Context, offset int64, timeout time.Duration, allowed []string) ([]json.RawMessage, error) {
	secs := int64(timeout / time.Second)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+pollSlack)
	defer cancel()
	var result json.RawMessage
	if err := c.call(ctx, "getUpdates", getUpdatesRequest{Offset: offset, Timeout: secs, AllowedUpdates: allowed}, &result); err != nil {
		return nil, err
	}
	var updates []json.RawMessage
	if err := json.Unmarshal(result, &updates); err != nil {
		return nil, &APIError{Method: "getUpdates", StatusCode: http.StatusOK, Description: "result is not an array of updates"}
	}
	return updates, nil
}

// sendMessageRequest is the body of sendMessage.
type sendMessageRequest struct {
	ChatID int64  `json:"chat_id"`
	Text   string `json:"text"`
}

// SendMessage sends text to chat chatID as plain text (no parse mode).
// Telegram refuses texts over 4096 characters with a bad_request error.
func (c *Client) SendMessage(ctx context.Context, chatID int64, text string) error {
	ctx, cancel := context.WithTimeout(ctx, sendTimeout)
	defer cancel()
	return c.call(ctx, "sendMessage", sendMessageRequest{ChatID: chatID, Text: text}, nil)
}

// apiResponse is the Bot API's answer envelope.
type apiResponse struct {
	OK          bool            `json:"ok"`
	Result      json.RawMessage `json:"result"`
	ErrorCode   int             `json:"error_code"`
	Description string          `json:"description"`
	Parameters  *struct {
		RetryAfter int `json:"retry_after"`
	} `json:"parameters"`
}

// call posts params as JSON to method and decodes the result into result
// (when not nil). Every error it returns is scrubbed of the token.
func (c *Client) call(ctx context.Context, method string, params any, result *json.RawMessage) error {
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("telegram: %s: encode the request: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.apiURL+"/bot"+c.token+"/"+method, bytes.NewReader(body))
	if err != nil {
		// Not err itself: url.Parse errors quote the whole URL. Scrubbed
		// anyway, in case a future version words it differently.
		return c.redactErr(fmt.Errorf("telegram: %s: cannot build the request (is the API URL %q valid?)", method, redact.URL(c.apiURL)))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ferry-telegram")

	resp, err := c.http.Do(req)
	if err != nil {
		return c.transportError(ctx, method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return c.transportError(ctx, method, fmt.Errorf("read the answer: %w", err))
	}
	if len(raw) > maxResponseBytes {
		return &APIError{Method: method, StatusCode: resp.StatusCode, Description: fmt.Sprintf("answer over %d bytes", maxResponseBytes)}
	}

	var ans apiResponse
	if err := json.Unmarshal(raw, &ans); err != nil {
		return &APIError{
			Method: method, StatusCode: resp.StatusCode,
			Description: "answer is not Bot API JSON: " + c.snippet(raw),
			RetryAfter:  retryAfterHeader(resp.Header),
		}
	}
	if !ans.OK || resp.StatusCode != http.StatusOK {
		e := &APIError{
			Method: method, StatusCode: resp.StatusCode, ErrorCode: ans.ErrorCode,
			Description: c.snippet([]byte(ans.Description)),
		}
		if ans.Parameters != nil && ans.Parameters.RetryAfter > 0 {
			e.RetryAfter = time.Duration(ans.Parameters.RetryAfter) * time.Second
		} else {
			e.RetryAfter = retryAfterHeader(resp.Header)
		}
		if e.StatusCode == http.StatusOK && e.ErrorCode == 0 {
			e.Description = "answer not ok" + cutPrefix(": ", e.Description)
		}
		return e
	}
	if result != nil {
		*result = ans.Result
	}
	return nil
}

func cutPrefix(sep, s string) string {
	if s == "" {
		return ""
	}
	return sep + s
}

// transportError wraps a failed request: *url.Error is stripped (its
// message repeats the URL, token included), the rest is scrubbed.
func (c *Client) transportError(ctx context.Context, method string, err error) error {
	err = redact.URLError(err)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// The message of a deadline or a cancel, plainly.
		err = context.Cause(ctx)
	}
	return &TransportError{Method: method, err: c.redactErr(err)}
}

// snippet is a bounded, valid UTF-8, token-free excerpt of b.
func (c *Client) snippet(b []byte) string {
	s := strings.TrimSpace(c.redact(strings.ToValidUTF8(string(b), "?")))
	if len(s) <= maxDescription {
		return s
	}
	i := maxDescription
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func retryAfterHeader(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get("Retry-After")); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}
