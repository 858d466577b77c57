package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/seal"
)

// sealedResult is the cost of seals to a worker: the best rate of ferry's
// worker stack on the same backlog, without and with seal keys, and the
// median of the rounds' own ratios.
type sealedResult struct {
	Unsealed float64 `json:"unsealed_jobs_per_sec"`
	Sealed   float64 `json:"sealed_jobs_per_sec"`
	Ratio    float64 `json:"sealed_worker_ratio"`
	// RoundRatios is each paired round's ratio, Ratio their median.
	RoundRatios []float64 `json:"sealed_worker_ratio_rounds"`
	// InsertRatio and BulkRatio are what sealing costs an inserter:
	// jobs.Inserter with keys against without, one job per transaction
	// from 8 goroutines and COPY in chunks (as in the bounded mode),
	// medians of the rounds' ratios. The seal is made in Go, the run id
	// claimed by the database's trigger (migration 014).
	InsertRatio float64 `json:"sealed_insert_ratio"`
	BulkRatio   float64 `json:"sealed_bulk_ratio"`
}

// sealedThroughput works a backlog of n no-op jobs rounds times each way,
// unsealed then sealed in each round, so that drift in the machine's load
// hits both alike. The ratio is the median of the rounds' ratios: two
// best-of rates measured a minute apart gave 0.76 and 0.93 for one build.
func sealedThroughput(ctx context.Context, serverURL string, n, rounds int) (sealedResult, error) {
	keys, err := seal.ParseKeys(seal.GenerateKey())
	if err != nil {
		return sealedResult{}, err
	}
	var r sealedResult
	p, err := pairedRounds(rounds,
		func() (float64, error) { return ferryThroughput(ctx, serverURL, n, nil, false) },
		func() (float64, error) { return ferryThroughput(ctx, serverURL, n, keys, false) })
	if err != nil {
		return r, err
	}
	r.Unsealed, r.Sealed, r.Ratio, r.RoundRatios = p.Base, p.Other, p.Ratio(), p.Ratios
	r.InsertRatio, r.BulkRatio, err = sealedInsert(ctx, serverURL, keys, n/10, rounds)
	return r, err
}

// sealedInsert measures n inserts one per transaction and a COPY of 10n
// jobs, without and with keys, each on a database of its own, taking turns
// in each round.
func sealedInsert(ctx context.Context, serverURL string, keys *seal.Keys, n, rounds int) (insertRatio, bulkRatio float64, err error) {
	var (
		inserters [2]*jobs.Inserter
		pools     [2]*pgxpool.Pool
	)
	for i, k := range []*seal.Keys{nil, keys} {
		pool, drop, err := scratch(ctx, serverURL)
		if err != nil {
			return 0, 0, err
		}
		defer drop()
		pools[i] = pool
		if k != nil {
			if _, err := seal.Arm(ctx, pool); err != nil {
				return 0, 0, err
			}
		}
		if inserters[i], err = jobs.NewInserter(pool, jobs.WithSealKeys(k)); err != nil {
			return 0, 0, err
		}
	}
	var ins, bulk []float64
	for round := range rounds {
		rate, brate, err := insertAndBulkRates(ctx, pools[:], inserters[:], n, round)
		if err != nil {
			return 0, 0, err
		}
		ins, bulk = append(ins, rate[1]/rate[0]), append(bulk, brate[1]/brate[0])
	}
	insertRatio, _ = medianMax(ins)
	bulkRatio, _ = medianMax(bulk)
	return insertRatio, bulkRatio, nil
}

// paired is what pairedRounds measured: the best rate of each side, and
// each round's ratio other/base in the order the rounds ran (recorded
// beside their median, which alone hides how far apart the rounds were
// on this shared machine).
type paired struct {
	Base, Other float64
	Ratios      []float64
}

// Ratio is the median of the rounds' ratios.
func (p paired) Ratio() float64 {
	m, _ := medianMax(p.Ratios)
	return m
}

// pairedRounds measures base and other in each of rounds rounds, so that
// drift in the machine's load hits both alike. The one that goes first
// turns with the round: neither always runs in the wake of the other's
// writes (its database dropped, a checkpoint).
func pairedRounds(rounds int, base, other func() (float64, error)) (paired, error) {
	var p paired
	for r := range rounds {
		var (
			b, o float64
			err  error
		)
		if r%2 == 0 {
			if b, err = base(); err == nil {
				o, err = other()
			}
		} else {
			if o, err = other(); err == nil {
				b, err = base()
			}
		}
		if err != nil {
			return paired{}, err
		}
		p.Base, p.Other = max(p.Base, b), max(p.Other, o)
		p.Ratios = append(p.Ratios, o/b)
	}
	return p, nil
}
