package broadcast

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Limits of a message.
const (
	// MaxDataBytes bounds a message's JSON.
	MaxDataBytes = 64 << 10
	// MaxChannelBytes bounds a channel name.
	MaxChannelBytes = 128
	// MinKeyBytes is the least length of a signing key.
	MinKeyBytes = 32
	// maxNotifyBytes is the largest NOTIFY payload Postgres accepts
	// ("must be shorter than 8000 bytes"); a larger envelope goes through
	// ferry_broadcast_message.
	maxNotifyBytes = 7999
)

var channelRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]+$`)

// Errors returned for bad input: nothing is published.
var (
	ErrInvalidChannel = errors.New("broadcast: invalid channel")
	ErrTooLarge       = errors.New("broadcast: message too large")
	ErrInvalidKeys    = errors.New("broadcast: invalid keys")
)

// CheckChannel returns an error wrapping ErrInvalidChannel unless name is 1
// to 128 letters, digits and _.:- characters.
func CheckChannel(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", ErrInvalidChannel)
	case len(name) > MaxChannelBytes:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrInvalidChannel, len(name), MaxChannelBytes)
	case !channelRE.MatchString(name):
		return fmt.Errorf("%w %q: only letters, digits and _.:- are allowed", ErrInvalidChannel, name)
	}
	return nil
}

// EnvKeys is the environment variable of the signing keys.
const EnvKeys = "FERRY_BROADCAST_KEYS"

// Keys sign (the first) and verify (all) messages. They never print their
// bytes: a Keys in a log line or an error says only how many there are.
type Keys [][]byte

func (k Keys) String() string                { return fmt.Sprintf("broadcast.Keys(%d keys)", len(k)) }
func (k Keys) GoString() string              { return k.String() }
func (k Keys) Format(f fmt.State, verb rune) { _, _ = f.Write([]byte(k.String())) }

// UnmarshalText sets k to the keys text holds, as ParseKeys reads them
// (for a configuration field read from a variable or a flag).
func (k *Keys) UnmarshalText(text []byte) error {
	keys, err := ParseKeys(string(text))
	if err != nil {
		return err
	}
	*k = keys
	return nil
}

// ParseKeys reads a FERRY_BROADCAST_KEYS value: comma-separated base64
// (padded or not), each key at least MinKeyBytes long. The first signs, all
// verify. An empty value is no keys (messages are neither signed nor
// checked). Errors name a key by its position, never by its content.
func ParseKeys(s string) (Keys, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	keys := make(Keys, 0, len(parts))
	for i, p := range parts {
		where := fmt.Sprintf("%s: key %d of %d", EnvKeys, i+1, len(parts))
		p = strings.TrimSpace(p)
		k, err := base64.StdEncoding.DecodeString(p)
		if err != nil {
			k, err = base64.RawStdEncoding.DecodeString(p)
		}
		switch {
		case p == "":
			return nil, fmt.Errorf("%w: %s is empty", ErrInvalidKeys, where)
		case err != nil:
			return nil, fmt.Errorf("%w: %s is not base64", ErrInvalidKeys, where)
		case len(k) < MinKeyBytes:
			return nil, fmt.Errorf("%w: %s is %d bytes, at least %d are needed (openssl rand -base64 32)", ErrInvalidKeys, where, len(k), MinKeyBytes)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// envelope is the NOTIFY payload: the channel, the publication time in
// Unix microseconds, the signature, and either the data (D) or the id of
// the ferry_broadcast_message row that holds it (R).
type envelope struct {
	C string          `json:"c"`
	T int64           `json:"t"`
	S string          `json:"s,omitempty"`
	D json.RawMessage `json:"d,omitempty"`
	R int64           `json:"r,omitempty"`
}

// encodeData marshals v and checks its size.
func encodeData(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("broadcast: encode message: %w", err)
	}
	if len(data) > MaxDataBytes {
		return nil, fmt.Errorf("%w: %d bytes of JSON, at most %d", ErrTooLarge, len(data), MaxDataBytes)
	}
	return data, nil
}

// inlineEnvelope is the NOTIFY payload carrying data itself. It is written
// by hand so that the signed bytes of data are the bytes sent.
func inlineEnvelope(channel string, t int64, sig string, data []byte) []byte {
	b := make([]byte, 0, len(data)+len(channel)+len(sig)+48)
	b = append(b, `{"c":"`...)
	b = append(b, channel...) // letters, digits and _.:-: nothing to escape
	b = append(b, `","t":`...)
	b = strconv.AppendInt(b, t, 10)
	if sig != "" {
		b = append(b, `,"s":"`...)
		b = append(b, sig...)
		b = append(b, '"')
	}
	b = append(b, `,"d":`...)
	b = append(b, data...)
	return append(b, '}')
}

// sign returns the signature of a message with key: HMAC-SHA256 over a
// version tag, the channel, the publication time and the data.
func sign(key []byte, channel string, t int64, data []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("ferry.broadcast.v1\n"))
	m.Write([]byte(channel))
	m.Write([]byte{'\n'})
	m.Write(strconv.AppendInt(nil, t, 10))
	m.Write([]byte{'\n'})
	m.Write(data)
	return base64.RawStdEncoding.EncodeToString(m.Sum(nil))
}

// verify reports why a message must be dropped ("unsigned", "forged"), or
// "" when it is accepted. Without keys every message is accepted.
func verify(keys Keys, channel string, t int64, data []byte, sig string) string {
	if len(keys) == 0 {
		return ""
	}
	if sig == "" {
		return DropUnsigned
	}
	got, err := base64.RawStdEncoding.DecodeString(sig)
	if err != nil {
		return DropForged
	}
	for _, k := range keys {
		want, _ := base64.RawStdEncoding.DecodeString(sign(k, channel, t, data))
		if hmac.Equal(got, want) {
			return ""
		}
	}
	return DropForged
}

// Reasons a received message is dropped, the reason label of
// ferry_broadcast_dropped_total.
const (
	// DropUnsigned: keys are set and the message carries no signature.
	DropUnsigned = "unsigned"
	// DropForged: the signature matches none of the keys.
	DropForged = "forged"
	// DropMalformed: a NOTIFY on ferry's channel that is not a message.
	DropMalformed = "malformed"
	// DropOverflow: a subscriber's queue was full (it gets a gap).
	DropOverflow = "overflow"
	// DropExpired: a large message's row was gone when read (subscribers
	// of its channel get a gap).
	DropExpired = "expired"
	// DropStale: a genuine signed message published outside the replay
	// window (older than Config.ReplayWindow, or dated more than
	// Config.MaxClockSkew ahead).
	DropStale = "stale"
	// DropReplayed: a genuine signed message already received within the
	// replay window: the same envelope NOTIFYed again.
	DropReplayed = "replayed"
)

// DropReasons lists every reason, for exporting zeros.
var DropReasons = []string{DropUnsigned, DropForged, DropMalformed, DropOverflow, DropExpired, DropStale, DropReplayed}

func unixMicro(t int64) time.Time { return time.UnixMicro(t).UTC() }
