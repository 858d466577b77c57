package seal

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// EnvKeys is the environment variable that holds the seal keys: comma-separated,
// base64 (standard or URL alphabet, padded or not), each at least MinKeyBytes
// decoded. The first seals; all verify.
const EnvKeys = "FERRY_SEAL_KEYS"

// MinKeyBytes is the least length of a decoded key.
const MinKeyBytes = 32

// Keys are the seal keys of a process. The zero value and nil hold none. Keys
// never print their bytes: String, GoString and Format say only how many
// there are, so a Keys that ends up in a log line or an error gives nothing
// away.
type Keys struct {
	keys    []key // keys[0] seals
	encrypt bool  // seal with the args encrypted
}

// key is one configured key, as derived keys: the raw key is kept nowhere.
type key struct {
	id  string // short hash of the key, in every seal it makes
	mac []byte // HMAC-SHA256 key
	enc []byte // AES-256-GCM key
	// macs holds HMAC-SHA256 states under mac for reuse: a worker checks
	// every job, and a new state per check was a fifth of its allocations.
	macs *sync.Pool
}

// ErrBadKeys marks an error of ParseKeys or FromEnv: bad input, which the
// CLIs report with exit code 2. The error's message is its own.
var ErrBadKeys = errors.New("bad seal keys")

type keysError struct{ err error }

func (e *keysError) Error() string   { return e.err.Error() }
func (e *keysError) Unwrap() []error { return []error{e.err, ErrBadKeys} }

// ParseKeys reads a FERRY_SEAL_KEYS value. An empty value is no keys (nil,
// nil). An error names the key by its position, never by its value, and
// is ErrBadKeys.
func ParseKeys(s string) (*Keys, error) {
	ks, err := parseKeys(s)
	if err != nil {
		return nil, &keysError{err: err}
	}
	return ks, nil
}

// UnmarshalText sets k to the keys text holds, as ParseKeys reads them
// (for a configuration field read from a variable or a flag).
func (k *Keys) UnmarshalText(text []byte) error {
	ks, err := ParseKeys(string(text))
	if err != nil {
		return err
	}
	if ks == nil {
		ks = &Keys{}
	}
	*k = *ks
	return nil
}

func parseKeys(s string) (*Keys, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	ks := &Keys{}
	seen := map[string]bool{}
	for i, p := range parts {
		p = strings.TrimSpace(p)
		where := fmt.Sprintf("%s: key %d of %d", EnvKeys, i+1, len(parts))
		if p == "" {
			return nil, fmt.Errorf("%s is empty", where)
		}
		raw, err := decodeBase64(p)
		if err != nil {
			return nil, fmt.Errorf("%s is not base64", where)
		}
		if len(raw) < MinKeyBytes {
			return nil, fmt.Errorf("%s decodes to %d bytes; a key needs at least %d (e.g. `openssl rand -base64 32`)", where, len(raw), MinKeyBytes)
		}
		k, err := derive(raw)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if seen[k.id] {
			return nil, fmt.Errorf("%s repeats an earlier key", where)
		}
		seen[k.id] = true
		ks.keys = append(ks.keys, k)
	}
	return ks, nil
}

// GenerateKey returns a new random key of MinKeyBytes, base64: a value for
// FERRY_SEAL_KEYS.
func GenerateKey() string {
	b := make([]byte, MinKeyBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24)
	return base64.StdEncoding.EncodeToString(b)
}

// EnvEncrypt is the environment variable that makes sealing encrypt the
// args too: true or false (strconv.ParseBool).
const EnvEncrypt = "FERRY_SEAL_ENCRYPT"

// FromEnv reads EnvKeys (ParseKeys of its value) and EnvEncrypt. Encryption
// without keys is an error.
func FromEnv() (*Keys, error) {
	keys, err := ParseKeys(os.Getenv(EnvKeys))
	if err != nil {
		return nil, err
	}
	encrypt := false
	if v := strings.TrimSpace(os.Getenv(EnvEncrypt)); v != "" {
		if encrypt, err = strconv.ParseBool(v); err != nil {
			return nil, &keysError{err: fmt.Errorf("%s=%q: not true or false", EnvEncrypt, v)}
		}
	}
	if encrypt && keys.Len() == 0 {
		return nil, &keysError{err: fmt.Errorf("%s=true needs %s", EnvEncrypt, EnvKeys)}
	}
	return keys.WithEncryption(encrypt), nil
}

// WithEncryption returns keys that, when they seal, also encrypt the args
// (on) or do not (off). Verification decrypts whatever was sealed
// encrypted, whichever this says. nil stays nil.
func (k *Keys) WithEncryption(on bool) *Keys {
	if k == nil {
		return nil
	}
	c := *k
	c.encrypt = on
	return &c
}

// Encrypts says whether sealing with k encrypts the args.
func (k *Keys) Encrypts() bool { return k != nil && k.encrypt }

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// derive makes the key id and the MAC and encryption keys of raw with HKDF,
// so that neither use of the key, nor its id, tells anything of the other.
func derive(raw []byte) (key, error) {
	mac, err := hkdf.Key(sha256.New, raw, nil, "ferry seal v1 mac", 32)
	if err != nil {
		return key{}, err
	}
	enc, err := hkdf.Key(sha256.New, raw, nil, "ferry seal v1 enc", 32)
	if err != nil {
		return key{}, err
	}
	id, err := hkdf.Key(sha256.New, raw, nil, "ferry seal v1 key id", 6)
	if err != nil {
		return key{}, err
	}
	macs := &sync.Pool{New: func() any { return hmac.New(sha256.New, mac) }}
	return key{id: hex.EncodeToString(id), mac: mac, enc: enc, macs: macs}, nil
}

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.keys)
}

// IDs are the key ids, the sealing key's first: short hashes that say which
// key sealed a job, safe to show.
func (k *Keys) IDs() []string {
	if k == nil {
		return nil
	}
	ids := make([]string, len(k.keys))
	for i, key := range k.keys {
		ids[i] = key.id
	}
	return ids
}

// madeBy says whether st names key k as its sealer: the whole key id
// (versions 1 and 2) or its first keyPrefixLen hex digits (version 3).
func (st stamp) madeBy(k key) bool {
	if st.V >= 3 {
		return len(st.K) == keyPrefixLen && strings.HasPrefix(k.id, st.K)
	}
	return k.id == st.K
}

// String says how many keys there are, and never shows one.
func (k Keys) String() string { return fmt.Sprintf("seal.Keys(%d keys, redacted)", len(k.keys)) }

// GoString is String, for %#v.
func (k Keys) GoString() string { return k.String() }

// Format is String for every verb, so that no verb prints the derived keys.
func (k Keys) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }
