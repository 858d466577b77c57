// Package schema is FERRY_SCHEMA: the Postgres schema that holds one ferry
// deployment's tables (River's and ferry's), so that several deployments
// share a database without seeing each other.
//
// A deployment in a schema of its own differs from the default one in four
// places, all derived here from the schema's name: its sessions' search_path
// (every connection ferry opens sets it, so ferry's own SQL finds its
// tables unqualified), River's Schema (River qualifies its tables and its
// LISTEN channels), its advisory keys (Key64, Key32: advisory locks are per
// database, not per schema) and its own NOTIFY channels (Channel). The
// default, "" or "public", changes nothing: every key and channel keeps
// the value it always had.
package schema

import (
	"fmt"
	"hash/fnv"
	"os"
	"regexp"
)

// Env is the environment variable that names the schema.
const Env = "FERRY_SCHEMA"

var nameRE = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,39}$`)

// Parse checks a schema name: lowercase letters, digits and underscores,
// not starting with a digit, at most 40 bytes (a NOTIFY channel named after
// it must fit Postgres's 63), not pg_… (Postgres's own);
// "" and "public" are the default schema and return "".
func Parse(s string) (string, error) {
	switch {
	case s == "" || s == "public":
		return "", nil
	case !nameRE.MatchString(s):
		return "", fmt.Errorf("schema %q: want lowercase letters, digits and underscores, not starting with a digit, at most 40 bytes", s)
	case len(s) >= 3 && s[:3] == "pg_":
		return "", fmt.Errorf("schema %q: names starting with pg_ are Postgres's", s)
	}
	return s, nil
}

// FromEnv is Parse of FERRY_SCHEMA.
func FromEnv() (string, error) {
	s, err := Parse(os.Getenv(Env))
	if err != nil {
		return "", fmt.Errorf("%s: %w", Env, err)
	}
	return s, nil
}

// hash is the 31-bit FNV-1a hash of the schema's name, never 0.
func hash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte("ferry-schema:" + s))
	return h.Sum32()&0x7fffffff | 1
}

// Key64 is a single-key (bigint) advisory lock key of the schema: base
// itself for the default schema, else base with the schema's hash in its
// high 32 bits (base fits in the low 32: every ferry key does).
func Key64(base int64, s string) int64 {
	if s == "" {
		return base
	}
	return int64(hash(s))<<32 | base&0xffffffff
}

// Key32 is the first int of a two-int advisory lock of the schema: base
// itself for the default schema, else base XOR the schema's hash.
func Key32(base int32, s string) int32 {
	if s == "" {
		return base
	}
	return base ^ int32(hash(s))
}

// Channel is a NOTIFY channel of the schema: base for the default schema,
// else base, a dot and the schema's name.
func Channel(base, s string) string {
	if s == "" {
		return base
	}
	return base + "." + s
}
