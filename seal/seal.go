package seal

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/tidwall/gjson"
)

// MetadataKey is the key of a job's metadata that held its seal before
// seals moved into a tag (migration 021). A job without a seal tag is
// checked by the seal it holds there, if any.
const MetadataKey = "ferry_seal"

// Tag returns the seal among a job's tags: the last tag that begins "3."
// or "3e.". River's tag format ([\w][\w-]+[\w]) has no dot, so no tag
// that River's client accepts is taken for a seal. The database reads the
// same tag (ferry_seal_tag, migration 021): the claim and the check are of
// one seal.
func Tag(tags []string) (string, bool) {
	for i := len(tags) - 1; i >= 0; i-- {
		if t := tags[i]; strings.HasPrefix(t, "3.") || strings.HasPrefix(t, "3e.") {
			return t, true
		}
	}
	return "", false
}

// version is the seal format this package writes: the MAC's domain and
// fields, and the compact form of stamp.encode. Seals of versions 1 (a JSON
// object) and 2 (a longer string) still verify.
const version = 3

// The lengths of version 3's fields: a key id prefix (hex), a run id and a
// MAC (bytes, written base64url).
const (
	keyPrefixLen = 4  // hex digits of the key id: 16 bits
	runIDBytes   = 12 // 96 random bits: base64url, 16 characters
	macBytes     = 16 // HMAC-SHA256 truncated to 128 bits: 22 characters
)

// stamp is a seal's fields. Versions 2 and 3 store them as one string
// (stamp.encode); version 1 stored this struct as a JSON object.
type stamp struct {
	V int    `json:"v"`
	K string `json:"k"`           // id of the key that sealed (a hash, never the key); version 3: its first 4 hex digits
	R string `json:"r"`           // run id: random bits, base64url
	Q string `json:"q"`           // the queue it was sealed for
	D int64  `json:"d"`           // due: unix seconds of its scheduled time at insert
	E bool   `json:"e,omitempty"` // the args are an envelope (FERRY_SEAL_ENCRYPT)
	M string `json:"m"`           // HMAC-SHA256, base64url; version 3: its first 16 bytes
}

// encode is the compact form of a version-3 seal, the job's seal tag:
//
//	3.<key id prefix>.<run id>.<due>.<mac>.<queue>
//
// with "3e" for "3" when the args are encrypted: 65 characters for the
// default queue, where version 2's form,
// 2.<key id>.<run id>.<due>.<0|1>.<mac>.<queue>, was 102. River writes a
// job's row anew at each update (fetch, completion), and a seal was two
// fifths of a no-op job's row. Hence a 96-bit run id, a 128-bit MAC and
// 16 bits of key id, which only pick the keys to try (package doc, "The
// seal"). The run id and the due time are the third and fourth fields,
// where the database reads them (migrations 014 and 021). Key id, run id
// and MAC (hex, base64url) and due (digits) hold no dot; the queue is
// last and taken whole. River's tags are at most 255 characters, and its
// queue names 128: a seal fits.
func (st stamp) encode() string {
	v := strconv.Itoa(st.V)
	if st.E {
		v += "e"
	}
	return strings.Join([]string{v, st.K, st.R, strconv.FormatInt(st.D, 10), st.M, st.Q}, ".")
}

// errMalformed is parseStamp's one error: the verifier says "malformed".
var errMalformed = errors.New("malformed seal")

// parseStamp reads a seal: a seal tag (version 3) or metadata.ferry_seal
// (a version-3 or version-2 string, or a version-1 object).
func parseStamp(v gjson.Result) (stamp, error) {
	var st stamp
	switch v.Type {
	case gjson.String:
		ver, _, _ := strings.Cut(v.Str, ".")
		switch ver {
		case "3", "3e":
			f := strings.SplitN(v.Str, ".", 6)
			if len(f) != 6 {
				return stamp{}, errMalformed
			}
			d, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				return stamp{}, errMalformed
			}
			st = stamp{V: 3, K: f[1], R: f[2], D: d, E: ver == "3e", M: f[4], Q: f[5]}
		case "2":
			f := strings.SplitN(v.Str, ".", 7)
			if len(f) != 7 || (f[4] != "0" && f[4] != "1") {
				return stamp{}, errMalformed
			}
			d, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				return stamp{}, errMalformed
			}
			st = stamp{V: 2, K: f[1], R: f[2], D: d, E: f[4] == "1", M: f[5], Q: f[6]}
		default:
			return stamp{}, errMalformed
		}
	case gjson.JSON:
		if err := json.Unmarshal([]byte(v.Raw), &st); err != nil || st.V != 1 {
			return stamp{}, errMalformed
		}
	default:
		return stamp{}, errMalformed
	}
	if st.K == "" || st.R == "" || st.M == "" {
		return stamp{}, errMalformed
	}
	return st, nil
}

// EnvelopeKey is the one key of the args of a job sealed encrypted:
// {"ferry_sealed": "<base64 of nonce and AES-256-GCM ciphertext>"}.
const EnvelopeKey = "ferry_sealed"

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
		args, tag, err := Seal(m.keys, p.Kind, p.Queue, p.EncodedArgs, due)
		if err != nil {
			return nil, err
		}
		p.EncodedArgs, p.Tags = args, append(p.Tags, tag)
	}
	return doInner(ctx)
}

// Seal seals a job of kind in queue with args (its encoded args), due at
// due, with keys' first key: a fresh run id and a MAC over the kind, the
// queue, the run id, the due time and the canonical form of the args. It
// returns the args to store (args, or when keys encrypt, an envelope of
// them) and the seal, to append to the job's tags. Inserters that bypass
// River's insert middleware call it for each job.
func Seal(keys *Keys, kind, queue string, args []byte, due time.Time) (sealedArgs []byte, tag string, err error) {
	if keys.Len() == 0 {
		return nil, "", errors.New("ferry: seal: no keys to seal with")
	}
	var run [runIDBytes]byte
	if _, err := rand.Read(run[:]); err != nil {
		return nil, "", fmt.Errorf("ferry: seal: run id: %w", err)
	}
	k := keys.keys[0]
	st := stamp{V: version, K: k.id[:keyPrefixLen], R: base64.RawURLEncoding.EncodeToString(run[:]), Q: queue, D: due.Unix(), E: keys.encrypt}
	if st.E {
		if args, err = st.encrypt(k.enc, kind, args); err != nil {
			return nil, "", err
		}
	}
	canon, err := canonical(args)
	if err != nil {
		return nil, "", fmt.Errorf("ferry: seal: %s args: %w", kind, err)
	}
	var sum [sha256.Size]byte
	st.M = base64.RawURLEncoding.EncodeToString(st.mac(sum[:0], k, kind, canon))
	return args, st.encode(), nil
}

// encrypt returns the envelope of args: AES-256-GCM under key, with a
// random nonce, and the kind, queue, run id and due time as additional
// data, so that an envelope moved to another job does not open.
func (st stamp) encrypt(key []byte, kind string, args []byte) ([]byte, error) {
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(args)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("ferry: seal: nonce: %w", err)
	}
	box := aead.Seal(nonce, nonce, args, st.additionalData(kind))
	return json.Marshal(map[string]string{EnvelopeKey: base64.StdEncoding.EncodeToString(box)})
}

// decrypt opens the envelope args sealed by encrypt.
func (st stamp) decrypt(key []byte, kind string, args []byte) ([]byte, error) {
	var env map[string]string
	if err := json.Unmarshal(args, &env); err != nil || len(env) != 1 || env[EnvelopeKey] == "" {
		return nil, errors.New("the args are not an envelope")
	}
	box, err := base64.StdEncoding.DecodeString(env[EnvelopeKey])
	if err != nil {
		return nil, errors.New("the envelope is not base64")
	}
	aead, err := newAEAD(key)
	if err != nil {
		return nil, err
	}
	if len(box) < aead.NonceSize() {
		return nil, errors.New("the envelope is too short")
	}
	plain, err := aead.Open(nil, box[:aead.NonceSize()], box[aead.NonceSize():], st.additionalData(kind))
	if err != nil {
		return nil, errors.New("the envelope does not open")
	}
	return plain, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("ferry: seal: cipher: %w", err)
	}
	return cipher.NewGCM(block)
}

// additionalData binds an envelope to its job: kind, queue, run id, due.
func (st stamp) additionalData(kind string) []byte {
	var ad []byte
	for _, f := range []string{"ferry seal v" + strconv.Itoa(st.V), kind, st.Q, st.R, strconv.FormatInt(st.D, 10)} {
		ad = binary.AppendUvarint(ad, uint64(len(f)))
		ad = append(ad, f...)
	}
	return ad
}

// mac appends to b the HMAC-SHA256 under key over the seal's fields and
// kind and the canonical args, each length-prefixed so that no two field
// lists encode alike: all of it, or for version 3 its first macBytes
// (a truncated HMAC, as RFC 4868's HMAC-SHA256-128).
func (st stamp) mac(b []byte, k key, kind string, canonArgs []byte) []byte {
	h := k.macs.Get().(hash.Hash)
	defer k.macs.Put(h)
	h.Reset()
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
	if st.E {
		field([]byte("encrypted"))
	}
	field(canonArgs)
	b = h.Sum(b)
	if st.V >= 3 {
		b = b[:len(b)-sha256.Size+macBytes]
	}
	return b
}

// canonical is the form of a JSON document that the MAC covers: one that
// survives Postgres's jsonb, which stores args parsed and gives back its own
// text of them (keys sorted by length then bytes, its own spacing, numbers
// as numeric, the last of repeated keys). Objects have their keys sorted,
// strings are re-quoted by encoding/json, numbers are written as exact
// rationals (big.Rat: 1.50, 15e-1 and 1.5 are one number), nothing has
// spaces. It is not JSON, only a stable encoding of the value.
func canonical(doc []byte) ([]byte, error) {
	if !gjson.ValidBytes(doc) {
		return nil, errors.New("not a JSON document")
	}
	return appendCanonical(make([]byte, 0, len(doc)), gjson.ParseBytes(doc))
}

// appendCanonical walks the parsed document without building it (gjson:
// a worker checks every job's args, and encoding/json's decoder into
// values was most of a seal check's allocations). Its output is the same
// as that of decoding into Go values with UseNumber and writing those
// (TestCanonical_SameAsDecoded): seals made before keep verifying.
func appendCanonical(out []byte, v gjson.Result) ([]byte, error) {
	switch v.Type {
	case gjson.Null:
		return append(out, "null"...), nil
	case gjson.False:
		return append(out, "false"...), nil
	case gjson.True:
		return append(out, "true"...), nil
	case gjson.String:
		return appendString(out, v.Str)
	case gjson.Number:
		return appendNumber(out, v.Raw)
	}
	var err error
	if v.IsArray() {
		out = append(out, '[')
		first := true
		v.ForEach(func(_, e gjson.Result) bool {
			if !first {
				out = append(out, ',')
			}
			first = false
			out, err = appendCanonical(out, e)
			return err == nil
		})
		if err != nil {
			return nil, err
		}
		return append(out, ']'), nil
	}
	if !v.IsObject() {
		return nil, fmt.Errorf("unexpected JSON value %.40s", v.Raw)
	}
	// Keys sorted; of a repeated key the last value, as jsonb keeps it.
	type member struct {
		key string
		val gjson.Result
	}
	var members []member
	v.ForEach(func(k, e gjson.Result) bool {
		members = append(members, member{k.Str, e})
		return true
	})
	slices.SortStableFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
	out = append(out, '{')
	wrote := false
	for i, m := range members {
		if i+1 < len(members) && members[i+1].key == m.key {
			continue // a later value of the same key wins
		}
		if wrote {
			out = append(out, ',')
		}
		wrote = true
		if out, err = appendString(out, m.key); err != nil {
			return nil, err
		}
		out = append(out, ':')
		if out, err = appendCanonical(out, m.val); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

// appendString writes s quoted as encoding/json writes it. Printable ASCII
// without a character it escapes is written as it is; anything else
// through json.Marshal.
func appendString(out []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, err := json.Marshal(s)
			return append(out, b...), err
		}
	}
	out = append(out, '"')
	out = append(out, s...)
	return append(out, '"'), nil
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
