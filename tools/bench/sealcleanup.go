package main

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/ferryq/ferry/seal"
)

// sealCleanupResult is what the sealcleanup mode measures: the leader's
// cleanup of n expired seal claims (seal.DeleteExpiredClaimsEach), timed
// per 100,000 claims deleted, and the WAL each 100,000 wrote. Flatness is
// the median time of the last ten 100,000s over the first ten's: about 1
// when a batch costs what it deletes, growing with n when each batch
// reads again what the ones before it deleted. Medians of ten, not single
// spans, so that a checkpoint's writes or another process's burst in one
// span do not make the figure.
type sealCleanupResult struct {
	Claims            int     `json:"claims"`
	Seconds           float64 `json:"seconds"`
	MsPer100kFirst    float64 `json:"seal_cleanup_ms_per_100k_first"`
	MsPer100kLast     float64 `json:"seal_cleanup_ms_per_100k_last"`
	Flatness          float64 `json:"seal_cleanup_flatness"`
	WALKBPer100kFirst float64 `json:"seal_cleanup_wal_kb_per_100k_first"`
	WALKBPer100kLast  float64 `json:"seal_cleanup_wal_kb_per_100k_last"`
}

// sealCleanupSpans is how many 100,000s the first and last figures are
// the medians of, at most (a smaller run's halves, fewer).
const sealCleanupSpans = 10

// sealCleanupBench fills a database of its own with n claims due ten days
// ago (one INSERT … SELECT), then deletes them as the leader's cleaner
// does, and times each 100,000 deleted.
//
// The cleanup starts from a checkpoint, as the hourly cleaner finds
// week-old claims: pages last written before the latest checkpoint, whose
// first change writes a full-page image to the WAL. Right after the fill,
// without one, the first batches wrote none and the batches after a
// checkpoint that began mid-run wrote one a page (2.4 times the WAL): a
// full run measured 3.86 between single first and last spans so, with
// the cleanup's reads flat.
func sealCleanupBench(ctx context.Context, serverURL string, n int) (sealCleanupResult, error) {
	const per = 100_000
	r := sealCleanupResult{Claims: n}
	if n < 2*per {
		return r, fmt.Errorf("seal cleanup: %d claims: at least %d, for a first and a last %d", n, 2*per, per)
	}
	of := min(sealCleanupSpans, n/(2*per))
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
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return r, fmt.Errorf("seal cleanup: checkpoint (a superuser's, or a member of pg_checkpoint's, which go tool task db grants): %w", err)
	}
	// The WAL position is read on a connection of its own, around each
	// 100,000: one cheap query, no read of the table.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	defer conn.Release()
	walAt := func() (int64, error) {
		var at int64
		err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&at)
		return at, err
	}
	var (
		spans   []time.Duration // the time of each 100,000 deleted
		wal     []int64         // the WAL bytes of each
		deleted int64
		werr    error
	)
	lastWAL, err := walAt()
	if err != nil {
		return r, err
	}
	began := time.Now()
	last := began
	total, err := seal.DeleteExpiredClaimsEach(ctx, pool, 0, func(d int64) {
		deleted += d
		if deleted < per {
			return
		}
		now := time.Now()
		at, err := walAt()
		werr = cmp.Or(werr, err)
		// A batch that completes several 100,000s shares its time and WAL
		// out among them.
		k := deleted / per
		for range k {
			spans = append(spans, now.Sub(last)/time.Duration(k))
			wal = append(wal, (at-lastWAL)/k)
		}
		last, lastWAL, deleted = now, at, deleted-k*per
	})
	r.Seconds = time.Since(began).Seconds()
	if err = cmp.Or(err, werr); err != nil {
		return r, err
	}
	if total != int64(n) || len(spans) < 2*of {
		return r, fmt.Errorf("seal cleanup: deleted %d of %d claims (%d spans of %d)", total, n, len(spans), per)
	}
	ms := make([]float64, len(spans))
	for i, d := range spans {
		ms[i] = float64(d.Microseconds()) / 1000
	}
	kb := make([]float64, len(wal))
	for i, b := range wal {
		kb[i] = float64(b) / 1024
	}
	r.MsPer100kFirst, _ = medianMax(ms[:of])
	r.MsPer100kLast, _ = medianMax(ms[len(ms)-of:])
	r.Flatness = r.MsPer100kLast / r.MsPer100kFirst
	r.WALKBPer100kFirst, _ = medianMax(kb[:of])
	r.WALKBPer100kLast, _ = medianMax(kb[len(kb)-of:])
	return r, nil
}
