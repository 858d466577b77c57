package outbox

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DefaultTolerance is how far a request's signature timestamp may be from
// the receiver's clock unless Verify is told otherwise.
const DefaultTolerance = 5 * time.Minute

// Errors of Verify, each wrapped with what was wrong. A receiver answers
// any of them with a 4xx (ferry does not retry a 4xx other than 408 and
// 429, so the delivery is stuck and visible, not retried forever).
var (
	// ErrNoSignature: the request has no Ferry-Signature header.
	ErrNoSignature = errors.New("outbox: no Ferry-Signature header")
	// ErrBadSignature: the header is malformed, no v1 value matches the
	// body with the secret, or the Ferry-Event-Id header is missing.
	ErrBadSignature = errors.New("outbox: bad signature")
	// ErrStale: the signature matches but its timestamp is further from
	// now than the tolerance (a replay, or a clock far off).
	ErrStale = errors.New("outbox: stale signature")
	// ErrBodyTooLarge: the body is over MaxPayloadBytes, more than any
	// outbox message.
	ErrBodyTooLarge = errors.New("outbox: request body over 256 KiB")
)

// Sign returns the Ferry-Signature header value of the delivery of event
// eventID with body, sent at t: "t=<unix seconds>,v1=<hex HMAC-SHA256>", the
// HMAC keyed with secret over "<unix seconds>.<event id>.<body>".
//
// DESIGN.md asks for the timestamp and the body; the event id is signed too,
// so that a request captured in flight cannot be replayed under another
// Ferry-Event-Id past a receiver that dedups on it.
//
// A receiver in another language checks it the same way: split the header
// on ",", take t and every v1, compute the HMAC of t + "." +
// Ferry-Event-Id + "." + the raw body, compare in constant time with each v1
// (several during a secret rotation), and refuse a t too far from now.
func Sign(secret []byte, t time.Time, eventID string, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(mac(secret, ts, eventID, body))
}

func mac(secret []byte, ts, eventID string, body []byte) []byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write([]byte(eventID))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks that r is a webhook delivery signed with secret, sent
// within tolerance of now (DefaultTolerance when 0 or less), and returns its
// event id (Ferry-Event-Id) and body. It is for Go HTTP receivers:
//
//	eventID, body, err := outbox.Verify(r, secret, 0)
//	if err != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized)
//		return
//	}
//	// INSERT ... ON CONFLICT (event_id) DO NOTHING, then the effect, in one tx.
//
// Verify reads r.Body (at most MaxPayloadBytes; a larger body is
// ErrBodyTooLarge) and replaces it with a reader over the same bytes, so
// code after it can read the body again; using the returned body is
// simpler. Errors wrap ErrNoSignature, ErrBadSignature, ErrStale or
// ErrBodyTooLarge.
//
// The signature covers the timestamp, the event id and the body: a request
// captured in flight can only be replayed as itself, within the tolerance,
// and the receiver's dedup on the event id absorbs that.
func Verify(r *http.Request, secret []byte, tolerance time.Duration) (eventID string, body []byte, err error) {
	return verifyAt(r, secret, tolerance, time.Now())
}

func verifyAt(r *http.Request, secret []byte, tolerance time.Duration, now time.Time) (string, []byte, error) {
	if len(secret) == 0 {
		return "", nil, errors.New("outbox: verify: empty secret")
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	header := r.Header.Get(SignatureHeader)
	if header == "" {
		return "", nil, ErrNoSignature
	}
	ts, sigs, err := parseSignature(header)
	if err != nil {
		return "", nil, err
	}

	body, err := readBody(r)
	if err != nil {
		return "", body, err
	}

	eventID := r.Header.Get(EventIDHeader)
	if eventID == "" {
		return "", body, fmt.Errorf("%w: no %s header", ErrBadSignature, EventIDHeader)
	}
	want := mac(secret, strconv.FormatInt(ts, 10), eventID, body)
	ok := false
	for _, s := range sigs {
		// Every value compared, none skipped: the time taken says
		// nothing about which matched.
		ok = hmac.Equal(s, want) || ok
	}
	if !ok {
		return "", body, fmt.Errorf("%w: no v1 value matches the event id and body with this secret", ErrBadSignature)
	}
	sent := time.Unix(ts, 0)
	if d := now.Sub(sent).Abs(); d > tolerance {
		return "", body, fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)", ErrStale, sent.UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	return eventID, body, nil
}

// parseSignature parses "t=<unix seconds>,v1=<hex>[,v1=<hex>…]". Other
// keys (a future v2) are ignored; t must appear once, v1 at least once.
func parseSignature(header string) (ts int64, sigs [][]byte, err error) {
	seenT := false
	for part := range strings.SplitSeq(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			if seenT {
				return 0, nil, fmt.Errorf("%w: t given twice", ErrBadSignature)
			}
			seenT = true
			ts, err = strconv.ParseInt(v, 10, 64)
			if err != nil {
				return 0, nil, fmt.Errorf("%w: t %q is not unix seconds", ErrBadSignature, v)
			}
		case "v1":
			// A value that is not hex cannot match; it is kept out
			// rather than failing the header, so one bad value among
			// rotated ones does no harm.
			if b, err := hex.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	if !seenT {
		return 0, nil, fmt.Errorf("%w: no t in %s", ErrBadSignature, SignatureHeader)
	}
	if len(sigs) == 0 {
		return 0, nil, fmt.Errorf("%w: no valid v1 in %s", ErrBadSignature, SignatureHeader)
	}
	return ts, sigs, nil
}

// readBody reads r.Body up to MaxPayloadBytes and puts the bytes back as
// r.Body.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > MaxPayloadBytes {
		return nil, fmt.Errorf("%w: Content-Length %d", ErrBodyTooLarge, r.ContentLength)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxPayloadBytes+1))
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err != nil {
		return body, fmt.Errorf("outbox: verify: read body: %w", err)
	}
	if len(body) > MaxPayloadBytes {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, MaxPayloadBytes)
	}
	return body, nil
}
