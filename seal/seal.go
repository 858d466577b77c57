package seal

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// MetadataKey is the key of a job's metadata that holds its seal.
const MetadataKey = "ferry_seal"

// version is the seal format: the MAC's domain and fields.
const version = 1

// stamp is a seal as stored in metadata.ferry_seal.
type stamp struct {
	V int    `json:"v"`
	K string `json:"k"` // id of the key that sealed (a hash, never the key)
	R string `json:"r"` // run id: 128 random bits, base64url
	Q string `json:"q"` // the queue it was sealed for
	D int64  `json:"d"` // due: unix seconds of its scheduled time at insert
	M string `json:"m"` // HMAC-SHA256, base64url
}

// Middleware returns the River insert middleware that seals every job its
// client inserts with keys' first key, on every insert path of the client
// (Insert, InsertTx, InsertMany, InsertManyTx and the InsertManyFast, COPY
// paths). With no keys it returns nil: add it only when non-nil.
func Middleware(keys *Keys) rivertype.Middleware {
	if keys.Len() == 0 {
		return nil
	}
	return &sealMiddleware{keys: keys, now: time.Now}
}

type sealMiddleware struct {
	river.MiddlewareDefaults
	keys *Keys
	now  func() time.Time
}

var _ rivertype.JobInsertMiddleware = (*sealMiddleware)(nil)

func (m *sealMiddleware) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	now := m.now()
	for _, p := range params {
		due := now
		if p.ScheduledAt != nil {
			due = *p.ScheduledAt
		}
		meta, err := Seal(m.keys, p.Kind, p.Queue, p.EncodedArgs, p.Metadata, due)
		if err != nil {
			return nil, err
		}
		p.Metadata = meta
	}
	return doInner(ctx)
}

// Seal returns metadata with a new seal of a job of kind in queue with args
// (its encoded args), due at due, made with keys' first key: a fresh run id
// and a MAC over the kind, the queue, the run id, the due time and the
// canonical form of args. Inserters that bypass River's insert middleware
// call it for each job.
func Seal(keys *Keys, kind, queue string, args, metadata []byte, due time.Time) ([]byte, error) {
	if keys.Len() == 0 {
		return nil, errors.New("ferry: seal: no keys to seal with")
	}
	canon, err := canonical(args)
	if err != nil {
		return nil, fmt.Errorf("ferry: seal: %s args: %w", kind, err)
	}
	var run [16]byte
	if _, err := rand.Read(run[:]); err != nil {
		return nil, fmt.Errorf("ferry: seal: run id: %w", err)
	}
	k := keys.keys[0]
	st := stamp{V: version, K: k.id, R: base64.RawURLEncoding.EncodeToString(run[:]), Q: queue, D: due.Unix()}
	st.M = base64.RawURLEncoding.EncodeToString(st.mac(k.mac, kind, canon))
	return withStamp(metadata, st)
}

// withStamp sets metadata.ferry_seal to st, keeping the rest.
func withStamp(metadata []byte, st stamp) ([]byte, error) {
	meta := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(metadata)) > 0 {
		if err := json.Unmarshal(metadata, &meta); err != nil {
			return nil, fmt.Errorf("ferry: seal: job metadata is not a JSON object: %w", err)
		}
		if meta == nil {
			meta = map[string]json.RawMessage{}
		}
	}
	b, err := json.Marshal(st)
	if err != nil {
		return nil, err
	}
	meta[MetadataKey] = b
	return json.Marshal(meta)
}

// mac is HMAC-SHA256 under key over the seal's fields and kind and the
// canonical args, each length-prefixed so that no two field lists encode
// alike.
func (st stamp) mac(key []byte, kind string, canonArgs []byte) []byte {
	h := hmac.New(sha256.New, key)
	var buf []byte
	field := func(b []byte) {
		buf = binary.AppendUvarint(buf[:0], uint64(len(b)))
		h.Write(buf)
		h.Write(b)
	}
	field([]byte("ferry seal v" + strconv.Itoa(st.V)))
	field([]byte(kind))
	field([]byte(st.Q))
	field([]byte(st.R))
	field(strconv.AppendInt(nil, st.D, 10))
	field(canonArgs)
	return h.Sum(nil)
}

// canonical is the form of a JSON document that the MAC covers: one that
// survives Postgres's jsonb, which stores args parsed and gives back its own
// text of them (keys sorted by length then bytes, its own spacing, numbers
// as numeric, the last of repeated keys). Objects have their keys sorted,
// strings are re-quoted by encoding/json, numbers are written as exact
// rationals (big.Rat: 1.50, 15e-1 and 1.5 are one number), nothing has
// spaces. It is not JSON, only a stable encoding of the value.
func canonical(doc []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("trailing data after the JSON value")
	}
	return appendCanonical(make([]byte, 0, len(doc)), v)
}

func appendCanonical(out []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(out, "null"...), nil
	case bool:
		return strconv.AppendBool(out, v), nil
	case string:
		b, err := json.Marshal(v)
		return append(out, b...), err
	case json.Number:
		return appendNumber(out, string(v))
	case []any:
		out = append(out, '[')
		for i, e := range v {
			if i > 0 {
				out = append(out, ',')
			}
			var err error
			if out, err = appendCanonical(out, e); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		out = append(out, '{')
		for i, k := range keys {
			if i > 0 {
				out = append(out, ',')
			}
			b, err := json.Marshal(k)
			if err != nil {
				return nil, err
			}
			out = append(append(out, b...), ':')
			if out, err = appendCanonical(out, v[k]); err != nil {
				return nil, err
			}
		}
		return append(out, '}'), nil
	}
	return nil, fmt.Errorf("unexpected JSON value %T", v)
}

// appendNumber writes a JSON number literal as an exact rational. An integer
// without sign trouble is written as it is; anything else through big.Rat,
// with its exponent bounded so that a literal like 1e999999999 cannot make
// it allocate without end.
func appendNumber(out []byte, lit string) ([]byte, error) {
	if isPlainInt(lit) {
		return append(out, lit...), nil
	}
	if i := strings.IndexAny(lit, "eE"); i >= 0 {
		exp, err := strconv.Atoi(lit[i+1:])
		if err != nil || exp > 1000 || exp < -1000 {
			return nil, fmt.Errorf("number %.40s: exponent out of range", lit)
		}
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok {
		return nil, fmt.Errorf("number %.40s: not a number", lit)
	}
	return append(out, r.RatString()...), nil
}

// isPlainInt says whether lit is an integer literal whose text is already
// its canonical form (not -0, no fraction or exponent).
func isPlainInt(lit string) bool {
	digits := strings.TrimPrefix(lit, "-")
	if digits == "" || digits == "0" && len(lit) > 1 || len(digits) > 18 {
		return false
	}
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
