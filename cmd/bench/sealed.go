package main

import (
	"context"

	"github.com/ferryq/ferry/seal"
)

// sealedResult is the cost of seals to a worker: the best rate of ferry's
// worker stack on the same backlog, without and with seal keys.
type sealedResult struct {
	Unsealed float64 `json:"unsealed_jobs_per_sec"`
	Sealed   float64 `json:"sealed_jobs_per_sec"`
}

// sealedThroughput works a backlog of n no-op jobs rounds times each way,
// alternating unsealed and sealed so that drift in the machine's load hits
// both, and keeps the best rate of each.
func sealedThroughput(ctx context.Context, serverURL string, n, rounds int) (sealedResult, error) {
	keys, err := seal.ParseKeys(seal.GenerateKey())
	if err != nil {
		return sealedResult{}, err
	}
	var r sealedResult
	for range rounds {
		u, err := ferryThroughput(ctx, serverURL, n, nil)
		if err != nil {
			return r, err
		}
		s, err := ferryThroughput(ctx, serverURL, n, keys)
		if err != nil {
			return r, err
		}
		r.Unsealed, r.Sealed = max(r.Unsealed, u), max(r.Sealed, s)
	}
	return r, nil
}
