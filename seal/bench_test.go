package seal

import (
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
)

// BenchmarkSeal is an inserter's cost of sealing one job, in Go.
func BenchmarkSeal(b *testing.B) {
	keys := benchKeys(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Seal(keys, "ferry.noop", "default", []byte(`{}`), time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheck is the worker's cost of a seal, per job: the checks of
// Verifier.Check on a sealed no-op job, which reads no database.
func BenchmarkCheck(b *testing.B) {
	keys := benchKeys(b)
	args, tag, err := Seal(keys, "ferry.noop", "default", []byte(`{}`), time.Now())
	if err != nil {
		b.Fatal(err)
	}
	v, err := NewVerifier(VerifierConfig{Keys: keys})
	if err != nil {
		b.Fatal(err)
	}
	job := &rivertype.JobRow{ID: 1, Kind: "ferry.noop", Queue: "default", Attempt: 1, EncodedArgs: args, Metadata: []byte(`{}`), Tags: []string{tag}}
	b.ReportAllocs()
	for b.Loop() {
		job.EncodedArgs = args
		if r := v.Check(job); r != nil {
			b.Fatal(r)
		}
	}
}

func benchKeys(b *testing.B) *Keys {
	b.Helper()
	keys, err := ParseKeys(GenerateKey())
	if err != nil {
		b.Fatal(err)
	}
	return keys
}
