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

func TestSignStandard(t *testing.T) {
	t.Parallel()

	t.Run("KnownVector", func(t *testing.T) {
		t.Parallel()
		// The Standard Webhooks specification's own example.
		keys, err := ParseSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
		require.NoError(t, err)
		got := SignStandard(keys, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
		require.Equal(t, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", got)
	})

	t.Run("OnePerKey", func(t *testing.T) {
		t.Parallel()
		at := time.Unix(1700000000, 0)
		a := SignStandard([][]byte{[]byte("k1")}, "1", at, []byte("{}"))
		b := SignStandard([][]byte{[]byte("k2")}, "1", at, []byte("{}"))
		require.Equal(t, a+" "+b, SignStandard([][]byte{[]byte("k1"), []byte("k2")}, "1", at, []byte("{}")))
		require.NotEqual(t, a, SignStandard([][]byte{[]byte("k1")}, "2", at, []byte("{}")))
		require.NotEqual(t, a, SignStandard([][]byte{[]byte("k1")}, "1", at.Add(time.Second), []byte("{}")))
		require.NotEqual(t, a, SignStandard([][]byte{[]byte("k1")}, "1", at, []byte("{ }")))
	})
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()
	keys, err := ParseSecrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(t, err)
	require.Equal(t, [][]byte{{0x31, 0xf2, 0x90, 0xf6, 0xbf, 0x06, 0x29, 0x8a, 0xab, 0x4f, 0x08, 0xd4, 0x3c, 0x3f, 0x08, 0x2c, 0xf6, 0x48, 0xa3, 0x62, 0xda, 0x2d, 0xa4, 0xb0}}, keys)

	keys, err = ParseSecrets(" raw-one , whsec_a2V5 ")
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("raw-one"), []byte("key")}, keys)

	for in, want := range map[string]string{
		"":                  "empty",
		"a,,b":              "secret 2 of 3: empty",
		"whsec_not base64!": "starts with whsec_ but the rest is not standard base64",
		"ok,whsec_":         "secret 2 of 2: whsec_ with no key after it",
	} {
		_, err := ParseSecrets(in)
		require.EqualError(t, err, want, "%q", in)
	}
	_, err = ParseSecrets("whsec_s3cr3t-not-base64")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cr3t", "an error never quotes the secret")
}

// standardRequest is a delivery with the Standard Webhooks headers only,
// signed with secret (as configured) at.
func standardRequest(t *testing.T, secret string, at time.Time, body string) *http.Request {
	t.Helper()
	keys, err := ParseSecrets(secret)
	require.NoError(t, err)
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	r.Header.Set(WebhookIDHeader, "42")
	r.Header.Set(WebhookTimestampHeader, strconv.FormatInt(at.Unix(), 10))
	r.Header.Set(WebhookSignatureHeader, SignStandard(keys, "42", at, []byte(body)))
	return r
}

func TestVerify_Standard(t *testing.T) {
	t.Parallel()
	const (
		secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		body   = `{"order_id":42}`
	)

	t.Run("Good", func(t *testing.T) {
		t.Parallel()
		eventID, got, err := Verify(standardRequest(t, secret, time.Now(), body), []byte(secret), 0)
		require.NoError(t, err)
		require.Equal(t, "42", eventID)
		require.Equal(t, body, string(got))
	})

	t.Run("RawSecret", func(t *testing.T) {
		t.Parallel()
		_, _, err := Verify(standardRequest(t, "a-raw-secret", time.Now(), body), []byte("a-raw-secret"), 0)
		require.NoError(t, err)
	})

	t.Run("PreferredOverFerrySignature", func(t *testing.T) {
		t.Parallel()
		// With both, the standard one decides: a bad webhook-signature is
		// not rescued by a good Ferry-Signature.
		r := standardRequest(t, "another-secret", time.Now(), body)
		r.Header.Set(EventIDHeader, "42")
		r.Header.Set(SignatureHeader, Sign([]byte(secret[len(SecretPrefix):]), time.Now(), "42", []byte(body)))
		_, _, err := Verify(r, []byte(secret), 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("Rotation", func(t *testing.T) {
		t.Parallel()
		// The sender signs with both; a receiver holding either, or both,
		// accepts; a third does not.
		r := func() *http.Request { return standardRequest(t, secret+",old-raw-secret", time.Now(), body) }
		for _, s := range []string{secret, "old-raw-secret", "old-raw-secret," + secret} {
			_, _, err := Verify(r(), []byte(s), 0)
			require.NoError(t, err, "secret %s", s)
		}
		_, _, err := Verify(r(), []byte("third-secret"), 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("WrongSecret", func(t *testing.T) {
		t.Parallel()
		_, _, err := Verify(standardRequest(t, "another", time.Now(), body), []byte(secret), 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("Tampered", func(t *testing.T) {
		t.Parallel()
		for name, tamper := range map[string]func(r *http.Request){
			"Body": func(r *http.Request) { r.Body = io.NopCloser(strings.NewReader(`{"order_id":43}`)) },
			"ID":   func(r *http.Request) { r.Header.Set(WebhookIDHeader, "43") },
			"Timestamp": func(r *http.Request) {
				r.Header.Set(WebhookTimestampHeader, strconv.FormatInt(time.Now().Unix()+1, 10))
			},
			// A receiver reading Ferry-Event-Id must not get an unsigned id.
			"FerryEventID": func(r *http.Request) { r.Header.Set(EventIDHeader, "43") },
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := standardRequest(t, secret, time.Now().Add(-time.Minute), body)
				tamper(r)
				_, _, err := Verify(r, []byte(secret), 0)
				require.ErrorIs(t, err, ErrBadSignature)
			})
		}
	})

	t.Run("Stale", func(t *testing.T) {
		t.Parallel()
		now := time.Unix(1800000000, 0)
		_, _, err := verifyAt(standardRequest(t, secret, now.Add(-6*time.Minute), body), []byte(secret), 0, now)
		require.ErrorIs(t, err, ErrStale)
		_, _, err = verifyAt(standardRequest(t, secret, now.Add(6*time.Minute), body), []byte(secret), 0, now)
		require.ErrorIs(t, err, ErrStale)
		_, _, err = verifyAt(standardRequest(t, secret, now.Add(-4*time.Minute), body), []byte(secret), 0, now)
		require.NoError(t, err)
	})

	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()
		good := standardRequest(t, secret, time.Now(), body).Header.Get(WebhookSignatureHeader)
		for name, tc := range map[string]struct{ header, value string }{
			"NoID":            {WebhookIDHeader, ""},
			"TimestampNotInt": {WebhookTimestampHeader, "soon"},
			"NoTimestamp":     {WebhookTimestampHeader, ""},
			"OtherVersion":    {WebhookSignatureHeader, "v1a," + good[3:]},
			"NotBase64":       {WebhookSignatureHeader, "v1,!!!"},
			"TooShort":        {WebhookSignatureHeader, "v1,YWJj"},
			"HexNotBase64":    {WebhookSignatureHeader, "v1=" + good[3:]},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := standardRequest(t, secret, time.Now(), body)
				if tc.value == "" {
					r.Header.Del(tc.header)
				} else {
					r.Header.Set(tc.header, tc.value)
				}
				_, _, err := Verify(r, []byte(secret), 0)
				require.ErrorIs(t, err, ErrBadSignature)
			})
		}
	})

	t.Run("NoSignatureAtAll", func(t *testing.T) {
		t.Parallel()
		r := standardRequest(t, secret, time.Now(), body)
		r.Header.Del(WebhookSignatureHeader)
		_, _, err := Verify(r, []byte(secret), 0)
		require.ErrorIs(t, err, ErrNoSignature)
	})

	t.Run("BadSecretSetting", func(t *testing.T) {
		t.Parallel()
		_, _, err := Verify(standardRequest(t, secret, time.Now(), body), []byte("whsec_%%%"), 0)
		require.Error(t, err)
		require.NotErrorIs(t, err, ErrBadSignature)
		require.Contains(t, err.Error(), "not standard base64")
	})
}
