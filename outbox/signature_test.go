package outbox

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSign(t *testing.T) {
	t.Parallel()

	t.Run("KnownVector", func(t *testing.T) {
		t.Parallel()
		// Computed independently: HMAC-SHA256("s3cret", `1700000000.42.{"a":1}`),
		// as a receiver in another language would.
		got := Sign([]byte("s3cret"), time.Unix(1700000000, 999), "42", []byte(`{"a":1}`))
		require.Equal(t, "t=1700000000,v1=8cdcf8a780cf67ec21373236130e65c74932711ed69970ce310a26d0d0d12776", got)
	})

	t.Run("DependsOnEverything", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(1700000000, 0)
		base := Sign([]byte("k"), at, "1", []byte("{}"))
		require.NotEqual(t, base, Sign([]byte("k2"), at, "1", []byte("{}")))
		require.NotEqual(t, base, Sign([]byte("k"), at.Add(time.Second), "1", []byte("{}")))
		require.NotEqual(t, base, Sign([]byte("k"), at, "2", []byte("{}")), "the event id is signed: no replay under another id")
		require.NotEqual(t, base, Sign([]byte("k"), at, "1", []byte("{ }")))
	})
}

// signedRequest is a delivery as the worker sends it, signed with secret at.
func signedRequest(secret []byte, at time.Time, body string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	r.Header.Set(EventIDHeader, "42")
	r.Header.Set(TopicHeader, "order.placed")
	r.Header.Set(SignatureHeader, Sign(secret, at, "42", []byte(body)))
	return r
}

func TestVerify(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec-test")
	const body = `{"order_id":42}`

	t.Run("Good", func(t *testing.T) {
		t.Parallel()
		r := signedRequest(secret, time.Now(), body)
		eventID, got, err := Verify(r, secret, 0)
		require.NoError(t, err)
		require.Equal(t, "42", eventID)
		require.Equal(t, body, string(got))

		// The body is put back for whatever reads it next.
		again, err := io.ReadAll(r.Body)
		require.NoError(t, err)
		require.Equal(t, body, string(again))
	})

	t.Run("EmptyBody", func(t *testing.T) {
		t.Parallel()
		r := signedRequest(secret, time.Now(), "")
		_, got, err := Verify(r, secret, 0)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("WrongSecret", func(t *testing.T) {
		t.Parallel()
		_, _, err := Verify(signedRequest([]byte("another"), time.Now(), body), secret, 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("TamperedBody", func(t *testing.T) {
		t.Parallel()
		r := signedRequest(secret, time.Now(), body)
		r.Body = io.NopCloser(strings.NewReader(`{"order_id":43}`))
		_, _, err := Verify(r, secret, 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("TamperedTimestamp", func(t *testing.T) {
		t.Parallel()
		// A replay re-stamped to look fresh: the HMAC covers t.
		at := time.Now().Add(-time.Hour)
		r := signedRequest(secret, at, body)
		_, v1, _ := strings.Cut(r.Header.Get(SignatureHeader), ",")
		r.Header.Set(SignatureHeader, "t="+strconv.FormatInt(time.Now().Unix(), 10)+","+v1)
		_, _, err := Verify(r, secret, 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("Stale", func(t *testing.T) {
		t.Parallel()
		for name, tc := range map[string]struct {
			age       time.Duration
			tolerance time.Duration
			stale     bool
		}{
			"DefaultToleranceInside":  {4 * time.Minute, 0, false},
			"DefaultToleranceOutside": {6 * time.Minute, 0, true},
			"FromTheFuture":           {-6 * time.Minute, 0, true},
			"ShortTolerance":          {30 * time.Second, 10 * time.Second, true},
			"LongTolerance":           {30 * time.Minute, time.Hour, false},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				now := time.Unix(1800000000, 0)
				_, _, err := verifyAt(signedRequest(secret, now.Add(-tc.age), body), secret, tc.tolerance, now)
				if tc.stale {
					require.ErrorIs(t, err, ErrStale)
				} else {
					require.NoError(t, err)
				}
			})
		}
	})

	t.Run("MissingHeader", func(t *testing.T) {
		t.Parallel()
		r := signedRequest(secret, time.Now(), body)
		r.Header.Del(SignatureHeader)
		_, _, err := Verify(r, secret, 0)
		require.ErrorIs(t, err, ErrNoSignature)
	})

	t.Run("MalformedHeader", func(t *testing.T) {
		t.Parallel()
		good := Sign(secret, time.Now(), "42", []byte(body))
		v1 := strings.SplitN(good, ",", 2)[1]
		for name, header := range map[string]string{
			"NoT":        v1,
			"NoV1":       strings.SplitN(good, ",", 2)[0],
			"TTwice":     good + ",t=1",
			"TNotInt":    "t=soon," + v1,
			"V1NotHex":   "t=1," + "v1=zz",
			"V1TooShort": "t=1,v1=abcd",
			"Garbage":    "sha256=deadbeef",
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := signedRequest(secret, time.Now(), body)
				r.Header.Set(SignatureHeader, header)
				_, _, err := Verify(r, secret, 0)
				require.ErrorIs(t, err, ErrBadSignature)
			})
		}
	})

	t.Run("MissingEventID", func(t *testing.T) {
		t.Parallel()
		r := signedRequest(secret, time.Now(), body)
		r.Header.Del(EventIDHeader)
		_, _, err := Verify(r, secret, 0)
		require.ErrorIs(t, err, ErrBadSignature)
		require.Contains(t, err.Error(), EventIDHeader)
	})

	t.Run("OversizedBody", func(t *testing.T) {
		t.Parallel()
		big := `"` + strings.Repeat("x", MaxPayloadBytes) + `"`

		// Declared length.
		r := signedRequest(secret, time.Now(), big)
		_, _, err := Verify(r, secret, 0)
		require.ErrorIs(t, err, ErrBodyTooLarge)

		// Unknown length (chunked): refused after MaxPayloadBytes+1.
		r = signedRequest(secret, time.Now(), big)
		r.ContentLength = -1
		r.Body = io.NopCloser(iotest.OneByteReader(bytes.NewReader([]byte(big))))
		_, _, err = Verify(r, secret, 0)
		require.ErrorIs(t, err, ErrBodyTooLarge)

		// Exactly the limit is fine.
		exact := strings.Repeat("x", MaxPayloadBytes)
		_, got, err := Verify(signedRequest(secret, time.Now(), exact), secret, 0)
		require.NoError(t, err)
		require.Len(t, got, MaxPayloadBytes)
	})

	t.Run("Rotation", func(t *testing.T) {
		t.Parallel()
		// During a rotation the sender signs with both secrets; a receiver
		// holding either accepts.
		oldSecret, newSecret := []byte("old-secret"), []byte("new-secret")
		now := time.Now()
		sigOld := Sign(oldSecret, now, "42", []byte(body))
		sigNew := Sign(newSecret, now, "42", []byte(body))
		header := sigOld + "," + strings.SplitN(sigNew, ",", 2)[1]
		for _, s := range [][]byte{oldSecret, newSecret} {
			r := signedRequest(s, now, body)
			r.Header.Set(SignatureHeader, header)
			eventID, _, err := Verify(r, s, 0)
			require.NoError(t, err, "secret %s", s)
			require.Equal(t, "42", eventID)
		}
		r := signedRequest(oldSecret, now, body)
		r.Header.Set(SignatureHeader, header)
		_, _, err := Verify(r, []byte("third-secret"), 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("EmptySecret", func(t *testing.T) {
		t.Parallel()
		_, _, err := Verify(signedRequest(nil, time.Now(), body), nil, 0)
		require.Error(t, err)
	})
}

func TestVerify_ReplayUnderAnotherEventID(t *testing.T) {
	t.Parallel()
	secret := []byte("whsec-test")
	r := signedRequest(secret, time.Now(), `{"order_id":42}`)
	r.Header.Set(EventIDHeader, "43") // the captured request, replayed as another event
	_, _, err := Verify(r, secret, 0)
	require.ErrorIs(t, err, ErrBadSignature)
}
