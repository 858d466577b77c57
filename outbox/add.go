package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ferryq/ferry/internal/base/traceparent"
)

// MaxPayloadBytes bounds a message's payload: its JSON text as Postgres
// renders jsonb (ferry_outbox_payload_size).
const MaxPayloadBytes = 256 << 10

// Errors of Add. Plain-SQL writers get the same rules from the database's
// constraints (named in each error's doc).
var (
	// ErrInvalidTopic: letters, digits and _.:- only, 1 to 128 characters
	// (ferry_outbox_topic_format).
	ErrInvalidTopic = errors.New("outbox: invalid topic")
	// ErrInvalidPayload: the payload is not valid JSON.
	ErrInvalidPayload = errors.New("outbox: payload is not valid JSON")
	// ErrPayloadTooLarge: over MaxPayloadBytes (ferry_outbox_payload_size).
	ErrPayloadTooLarge = errors.New("outbox: payload over 256 KiB")
	// ErrInvalidDedupKey: 1 to 256 characters when set
	// (ferry_outbox_dedup_key_length).
	ErrInvalidDedupKey = errors.New("outbox: invalid dedup key")
	// ErrDuplicate: a message of the topic already has this dedup key
	// (ferry_outbox_topic_dedup_key). The caller's transaction stays usable.
	ErrDuplicate = errors.New("outbox: duplicate dedup key for topic")
	// ErrInvalidOrderingKey: 1 to 256 characters when set
	// (ferry_outbox_ordering_key_length).
	ErrInvalidOrderingKey = errors.New("outbox: invalid ordering key")
)

type addOptions struct {
	dedupKey    *string
	orderingKey *string
}

// AddOption is an option of Add.
type AddOption func(*addOptions)

// WithDedupKey makes the message unique per topic by key: a second Add of
// the same topic and key returns ErrDuplicate and writes nothing.
func WithDedupKey(key string) AddOption {
	return func(o *addOptions) { o.dedupKey = &key }
}

// WithOrderingKey orders the message after the messages of the same topic
// and key written before it: to each route, their deliveries start in
// message order (id), one at a time, and this one waits until the one
// before it is delivered; while one is stuck, the key is blocked (see the
// package doc, "Ordered delivery"). Messages without a key are delivered in
// parallel. Keys are compared exactly: a tenant, an account, an order id.
func WithOrderingKey(key string) AddOption {
	return func(o *addOptions) { o.orderingKey = &key }
}

// Add writes a message in the caller's transaction and returns its id (the
// event id receivers dedup on). It exists if and only if tx commits; the
// relay turns it into delivery jobs right after. payload is JSON
// (json.RawMessage or []byte) or any value json.Marshal accepts. When ctx
// holds an OpenTelemetry span and the service imports the otelferry module,
// the span's W3C trace context is stored with the message (columns
// traceparent, tracestate), and the relay, the delivery and the webhook
// request (its traceparent header) join that trace.
//
// Bad input returns one of the errors above before anything is written, and
// a duplicate dedup key does not abort tx.
func Add(ctx context.Context, tx pgx.Tx, topic string, payload any, opts ...AddOption) (int64, error) {
	var o addOptions
	for _, opt := range opts {
		opt(&o)
	}
	if !nameRE.MatchString(topic) {
		return 0, fmt.Errorf("%w %q: letters, digits and _.:- only, 1 to 128 characters", ErrInvalidTopic, topic)
	}
	if o.dedupKey != nil && (len(*o.dedupKey) == 0 || len([]rune(*o.dedupKey)) > 256) {
		return 0, fmt.Errorf("%w: 1 to 256 characters", ErrInvalidDedupKey)
	}
	if o.orderingKey != nil && (len(*o.orderingKey) == 0 || len([]rune(*o.orderingKey)) > 256) {
		return 0, fmt.Errorf("%w: 1 to 256 characters", ErrInvalidOrderingKey)
	}
	body, err := encodePayload(payload)
	if err != nil {
		return 0, err
	}
	// The caller's span, if any: the relay, the delivery jobs and the
	// webhook requests join its trace.
	parent, state := traceparent.FromContext(ctx)
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO ferry_outbox (topic, payload, dedup_key, traceparent, tracestate, ordering_key)
		VALUES ($1, $2, $3, NULLIF($4, ''), NULLIF($5, ''), $6)
		ON CONFLICT (topic, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING RETURNING id`,
		topic, string(body), o.dedupKey, parent, state, o.orderingKey).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q in %q", ErrDuplicate, *o.dedupKey, topic)
	}
	if err != nil {
		return 0, translate(err)
	}
	return id, nil
}

func encodePayload(payload any) ([]byte, error) {
	var raw []byte
	switch p := payload.(type) {
	case json.RawMessage:
		raw = p
	case []byte:
		raw = p
	default:
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
		}
		raw = b
	}
	if !json.Valid(raw) {
		return nil, ErrInvalidPayload
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, raw); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
	}
	if compact.Len() > MaxPayloadBytes {
		return nil, fmt.Errorf("%w: %d bytes", ErrPayloadTooLarge, compact.Len())
	}
	return compact.Bytes(), nil
}

// translate maps the database's constraint errors to Add's errors, for
// the cases Go's own checks cannot foresee (jsonb renders a little larger
// than compact JSON).
func translate(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("outbox: add: %w", err)
	}
	switch pgErr.ConstraintName {
	case "ferry_outbox_topic_format":
		return fmt.Errorf("%w: %s", ErrInvalidTopic, pgErr.Message)
	case "ferry_outbox_payload_size":
		return fmt.Errorf("%w: %s", ErrPayloadTooLarge, pgErr.Message)
	case "ferry_outbox_dedup_key_length":
		return fmt.Errorf("%w: %s", ErrInvalidDedupKey, pgErr.Message)
	case "ferry_outbox_ordering_key_length":
		return fmt.Errorf("%w: %s", ErrInvalidOrderingKey, pgErr.Message)
	case "ferry_outbox_topic_dedup_key":
		return fmt.Errorf("%w: %s", ErrDuplicate, pgErr.Message)
	}
	if pgErr.Code == "22P02" || pgErr.Code == "22023" { // invalid json text
		return fmt.Errorf("%w: %s", ErrInvalidPayload, pgErr.Message)
	}
	return fmt.Errorf("outbox: add: %w", err)
}
