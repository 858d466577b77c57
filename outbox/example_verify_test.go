package outbox_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/ferryq/ferry/outbox"
)

// A Go HTTP receiver checks the signature, then records the event id under
// its own UNIQUE constraint together with the effect, so a redelivery does
// nothing.
func ExampleVerify() {
	secret := []byte("whsec-from-the-environment")

	receiver := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		eventID, body, err := outbox.Verify(r, secret, 0)
		switch {
		case errors.Is(err, outbox.ErrStale):
			http.Error(w, "stale", http.StatusBadRequest)
			return
		case err != nil:
			// Any other 4xx makes the delivery stuck and visible.
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		// In one transaction: INSERT INTO received (event_id) ... ON
		// CONFLICT DO NOTHING, then the effect only if a row went in.
		fmt.Printf("event %s: %s\n", eventID, body)
		w.WriteHeader(http.StatusNoContent)
	})

	// A request as the outbox.deliver worker sends it.
	body := `{"order_id":42}`
	req := httptest.NewRequest(http.MethodPost, "/hooks/orders", strings.NewReader(body))
	req.Header.Set(outbox.EventIDHeader, "42")
	req.Header.Set(outbox.SignatureHeader, outbox.Sign(secret, time.Now(), "42", []byte(body)))
	rec := httptest.NewRecorder()
	receiver.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// The same request signed with another secret.
	req = httptest.NewRequest(http.MethodPost, "/hooks/orders", strings.NewReader(body))
	req.Header.Set(outbox.EventIDHeader, "42")
	req.Header.Set(outbox.SignatureHeader, outbox.Sign([]byte("not-the-secret"), time.Now(), "42", []byte(body)))
	rec = httptest.NewRecorder()
	receiver.ServeHTTP(rec, req)
	fmt.Println(rec.Code)

	// Output:
	// event 42: {"order_id":42}
	// 204
	// 401
}
