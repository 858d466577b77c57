package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ferryq/ferry/seal"
)

// sealCleanupResult is what the sealcleanup mode measures: the leader's
// cleanup of n expired seal claims (seal.DeleteExpiredClaimsEach), timed
// per 100,000 claims deleted. Flatness is the last 100,000's time over the
// first's: about 1 when a batch costs what it deletes, growing with n when
// each batch reads again what the ones before it deleted.
type sealCleanupResult struct {
	Claims         int     `json:"claims"`
	Seconds        float64 `json:"seconds"`
	MsPer100kFirst float64 `json:"seal_cleanup_ms_per_100k_first"`
	MsPer100kLast  float64 `json:"seal_cleanup_ms_per_100k_last"`
	Flatness       float64 `json:"seal_cleanup_flatness"`
}

// sealCleanupBench fills a database of its own with n claims due ten days
// ago (one INSERT … SELECT), then deletes them as the leader's cleaner
// does, and times each 100,000 deleted.
func sealCleanupBench(ctx context.Context, serverURL string, n int) (sealCleanupResult, error) {
	const per = 100_000
	r := sealCleanupResult{Claims: n}
	if n < 2*per {
		return r, fmt.Errorf("seal cleanup: %d claims: at least %d, for a first and a last %d", n, 2*per, per)
	}
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return r, err
	}
	defer drop()
	if _, err := pool.Exec(ctx, `
		INSERT INTO ferry_seal_run (run_id, job_id, claimed_at, due)
		SELECT 'bench-' || g, g, now() - interval '10 days', now() - interval '10 days'
		FROM generate_series(1, $1) g`, n); err != nil {
		return r, fmt.Errorf("seal cleanup: fill: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE ferry_seal_run`); err != nil {
		return r, fmt.Errorf("seal cleanup: vacuum: %w", err)
	}
	var spans []time.Duration // the time of each 100,000 deleted
	var deleted int64
	began := time.Now()
	last := began
	total, err := seal.DeleteExpiredClaimsEach(ctx, pool, 0, func(d int64) {
		deleted += d
		for deleted >= per {
			now := time.Now()
			spans = append(spans, now.Sub(last))
			last, deleted = now, deleted-per
		}
	})
	r.Seconds = time.Since(began).Seconds()
	if err != nil {
		return r, err
	}
	if total != int64(n) || len(spans) < 2 {
		return r, fmt.Errorf("seal cleanup: deleted %d of %d claims (%d spans of %d)", total, n, len(spans), per)
	}
	r.MsPer100kFirst = float64(spans[0].Microseconds()) / 1000
	r.MsPer100kLast = float64(spans[len(spans)-1].Microseconds()) / 1000
	r.Flatness = r.MsPer100kLast / r.MsPer100kFirst
	return r, nil
}
