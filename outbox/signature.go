package outbox

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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

// Request headers of Standard Webhooks (www.standardwebhooks.com), sent with
// every webhook delivery beside the Ferry-* ones, so that a receiver can
// verify it with that project's library in its own language.
const (
	// WebhookIDHeader carries the event id, the same as Ferry-Event-Id:
	// stable across retries, what receivers dedup on.
	WebhookIDHeader = "webhook-id"
	// WebhookTimestampHeader carries the time of the attempt, in unix
	// seconds.
	WebhookTimestampHeader = "webhook-timestamp"
	// WebhookSignatureHeader carries one "v1,<base64 HMAC-SHA256>" per
	// secret of the route, separated by spaces (several during a rotation).
	// It is absent when the route has no secret.
	WebhookSignatureHeader = "webhook-signature"
)

// SecretPrefix starts a secret in the Standard Webhooks form: "whsec_" and
// the key in standard base64. A secret without it is the key itself.
const SecretPrefix = "whsec_"

// Errors of Verify, each wrapped with what was wrong. A receiver answers
// any of them with a 4xx (ferry does not retry a 4xx other than 408 and
// 429, so the delivery is stuck and visible, not retried forever).
var (
	// ErrNoSignature: the request has neither a webhook-signature nor a
	// Ferry-Signature header.
	ErrNoSignature = errors.New("outbox: no webhook-signature or Ferry-Signature header")
	// ErrBadSignature: the header is malformed, no signature in it matches
	// the event id and the body with the secret, or the event id header is
	// missing (or, when both are sent, Ferry-Event-Id differs from
	// webhook-id).
	ErrBadSignature = errors.New("outbox: bad signature")
	// ErrStale: the signature matches but its timestamp is further from
	// now than the tolerance (a replay, or a clock far off).
	ErrStale = errors.New("outbox: stale signature")
	// ErrBodyTooLarge: the body is over MaxPayloadBytes, more than any
	// outbox message.
	ErrBodyTooLarge = errors.New("outbox: request body over 256 KiB")
)

// ParseSecrets turns a route's secret setting into its signing keys: one
// secret, or several separated by commas (all of them sign each request, so
// a receiver holding any one accepts it: rotate by adding the new secret,
// moving the receivers to it, then removing the old). Each secret is either
// "whsec_" and the key in standard base64 (Standard Webhooks), or the key's
// own bytes ("raw"); a raw secret cannot hold a comma. Spaces around each
// secret are trimmed. The errors never quote a secret.
func ParseSecrets(s string) ([][]byte, error) {
	parts := strings.Split(s, ",")
	keys := make([][]byte, 0, len(parts))
	for i, part := range parts {
		part = strings.TrimSpace(part)
		where := ""
		if len(parts) > 1 {
			where = fmt.Sprintf("secret %d of %d: ", i+1, len(parts))
		}
		if part == "" {
			return nil, fmt.Errorf("%sempty", where)
		}
		if b64, ok := strings.CutPrefix(part, SecretPrefix); ok {
			key, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return nil, fmt.Errorf("%sstarts with %s but the rest is not standard base64", where, SecretPrefix)
			}
			if len(key) == 0 {
				return nil, fmt.Errorf("%s%s with no key after it", where, SecretPrefix)
			}
			keys = append(keys, key)
			continue
		}
		keys = append(keys, []byte(part))
	}
	return keys, nil
}

// SignStandard returns the webhook-signature header value of the delivery of
// event id with body, sent at t, signed with each key: "v1,<base64>", space
// separated, each the HMAC-SHA256 keyed with the key over "<id>.<unix
// seconds>.<body>" (Standard Webhooks, symmetric signatures).
func SignStandard(keys [][]byte, id string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	for i, key := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac(key, id, ts, body)))
	}
	return b.String()
}

// Sign returns the Ferry-Signature header value of the delivery of event
// eventID with body, sent at t: "t=<unix seconds>,v1=<hex HMAC-SHA256>", the
// HMAC keyed with key over "<unix seconds>.<event id>.<body>". Deliveries
// carry it beside webhook-signature (SignStandard), for receivers written
// before ferry sent the standard headers; a route with several secrets
// sends one v1 per secret.
//
// DESIGN.md asks for the timestamp and the body; the event id is signed too,
// so that a request captured in flight cannot be replayed under another
// Ferry-Event-Id past a receiver that dedups on it.
func Sign(key []byte, t time.Time, eventID string, body []byte) string {
	return signFerry([][]byte{key}, t, eventID, body)
}

func signFerry(keys [][]byte, t time.Time, eventID string, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=" + ts)
	for _, key := range keys {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(key, ts, eventID, body)))
	}
	return b.String()
}

// mac is the HMAC-SHA256 keyed with key over "<a>.<b>.<body>".
func mac(key []byte, a, b string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(a))
	h.Write([]byte{'.'})
	h.Write([]byte(b))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks that r is a webhook delivery signed with secret, sent
// within tolerance of now (DefaultTolerance when 0 or less), and returns its
// event id and body. It is for Go HTTP receivers:
//
//	eventID, body, err := outbox.Verify(r, secret, 0)
//	if err != nil {
//		http.Error(w, "bad signature", http.StatusUnauthorized)
//		return
//	}
//	// INSERT ... ON CONFLICT (event_id) DO NOTHING, then the effect, in one tx.
//
// secret is written as the worker's route takes it (ParseSecrets): a
// "whsec_" secret, a raw one, or several separated by commas, any of which
// may match. Verify checks the Standard Webhooks headers (webhook-id,
// webhook-timestamp, webhook-signature) when the request has them, and
// Ferry-Signature with Ferry-Event-Id otherwise (a worker from before the
// standard headers); a receiver in another language can use a Standard
// Webhooks library instead (see the package doc).
//
// Verify reads r.Body (at most MaxPayloadBytes; a larger body is
// ErrBodyTooLarge) and replaces it with a reader over the same bytes, so
// code after it can read the body again; using the returned body is
// simpler. Errors wrap ErrNoSignature, ErrBadSignature, ErrStale or
// ErrBodyTooLarge.
//
// Either signature covers the timestamp, the event id and the body: a
// request captured in flight can only be replayed as itself, within the
// tolerance, and the receiver's dedup on the event id absorbs that.
func Verify(r *http.Request, secret []byte, tolerance time.Duration) (eventID string, body []byte, err error) {
	return verifyAt(r, secret, tolerance, time.Now())
}

func verifyAt(r *http.Request, secret []byte, tolerance time.Duration, now time.Time) (string, []byte, error) {
	if len(secret) == 0 {
		return "", nil, errors.New("outbox: verify: empty secret")
	}
	keys, err := ParseSecrets(string(secret))
	if err != nil {
		return "", nil, fmt.Errorf("outbox: verify: secret: %w", err)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	std, legacy := r.Header.Get(WebhookSignatureHeader), r.Header.Get(SignatureHeader)
	if std == "" && legacy == "" {
		return "", nil, ErrNoSignature
	}

	body, err := readBody(r)
	if err != nil {
		return "", body, err
	}

	var (
		eventID string
		ts      int64
	)
	if std != "" {
		eventID, ts, err = verifyStandard(r.Header, std, keys, body)
	} else {
		eventID, ts, err = verifyFerry(r.Header, legacy, keys, body)
	}
	if err != nil {
		return "", body, err
	}
	sent := time.Unix(ts, 0)
	if d := now.Sub(sent).Abs(); d > tolerance {
		return "", body, fmt.Errorf("%w: signed at %s, %s from now (tolerance %s)", ErrStale, sent.UTC().Format(time.RFC3339), d.Round(time.Second), tolerance)
	}
	return eventID, body, nil
}

// verifyStandard checks the Standard Webhooks headers and returns the
// signed event id and timestamp.
func verifyStandard(h http.Header, header string, keys [][]byte, body []byte) (string, int64, error) {
	id := h.Get(WebhookIDHeader)
	if id == "" {
		return "", 0, fmt.Errorf("%w: no %s header", ErrBadSignature, WebhookIDHeader)
	}
	// A receiver reading Ferry-Event-Id rather than the id Verify returns
	// must not be handed an id the signature does not cover.
	if fid := h.Get(EventIDHeader); fid != "" && fid != id {
		return "", 0, fmt.Errorf("%w: %s %q is not the signed %s %q", ErrBadSignature, EventIDHeader, fid, WebhookIDHeader, id)
	}
	tsText := h.Get(WebhookTimestampHeader)
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s %q is not unix seconds", ErrBadSignature, WebhookTimestampHeader, tsText)
	}
	var sigs [][]byte
	for part := range strings.FieldsSeq(header) {
		// Other versions (v1a, asymmetric) and values that are not
		// base64 of a SHA-256 are left out rather than failing the
		// header: one bad value among rotated ones does no harm.
		if v, ok := strings.CutPrefix(part, "v1,"); ok {
			if b, err := base64.StdEncoding.DecodeString(v); err == nil && len(b) == sha256.Size {
				sigs = append(sigs, b)
			}
		}
	}
	if len(sigs) == 0 {
		return "", 0, fmt.Errorf("%w: no valid v1 in %s", ErrBadSignature, WebhookSignatureHeader)
	}
	if !anyMatch(sigs, keys, id, tsText, body) {
		return "", 0, fmt.Errorf("%w: no v1 value matches the event id and body with this secret", ErrBadSignature)
	}
	return id, ts, nil
}

// verifyFerry checks Ferry-Signature and Ferry-Event-Id and returns the
// signed event id and timestamp.
func verifyFerry(h http.Header, header string, keys [][]byte, body []byte) (string, int64, error) {
	ts, sigs, err := parseSignature(header)
	if err != nil {
		return "", 0, err
	}
	id := h.Get(EventIDHeader)
	if id == "" {
		return "", 0, fmt.Errorf("%w: no %s header", ErrBadSignature, EventIDHeader)
	}
	if !anyMatch(sigs, keys, strconv.FormatInt(ts, 10), id, body) {
		return "", 0, fmt.Errorf("%w: no v1 value matches the event id and body with this secret", ErrBadSignature)
	}
	return id, ts, nil
}

// anyMatch says whether any of sigs is the mac of (a, b, body) with any of
// keys. Every pair is compared, none skipped: the time taken says nothing
// about which matched.
func anyMatch(sigs, keys [][]byte, a, b string, body []byte) bool {
	ok := false
	for _, key := range keys {
		want := mac(key, a, b, body)
		for _, s := range sigs {
			ok = hmac.Equal(s, want) || ok
		}
	}
	return ok
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
