package main

import (
	"context"
	"flag"
	"os"
	"slices"
	"time"

	"github.com/ferryq/ferry/internal/base/scratchdb"
	"github.com/ferryq/ferry/internal/testkit/lockoracle"
)

// Flags of -mode locks (the lock_* keys of -mode all and quick use 16
// processes and 10,000 or 2,000 acquisitions).
var (
	lockProcs        = flag.Int("lock-procs", 16, "locks mode: contender processes")
	lockAcquisitions = flag.Int("lock-acquisitions", 10_000, "locks mode: acquisitions in all")
	lockKills        = flag.Int("lock-kills", 10, "locks mode: kill -9 of the holder, and as many pg_terminate_backend of its sessions")
)

// lockBench runs the locks fencing oracle (internal/testkit/lockoracle):
// procs contender processes take one lock n times in all, with a ttl of
// 1 s, while the holder is killed (kill -9) kills times and its sessions
// terminated (pg_terminate_backend) as many times. Keys lock_overlaps
// (writes fenced by an older token committed after a newer one: must be 0)
// and lock_handover_p99_ms (a holder's last fenced write before its release
// to the next holder's first, by the database's clock).
func lockBench(ctx context.Context, serverURL string, procs, n, kills int) (lockoracle.Result, error) {
	dir, bin, err := buildIntoTemp("./internal/testkit/lockoracle/contender")
	if err != nil {
		return lockoracle.Result{}, err
	}
	defer os.RemoveAll(dir)
	url, drop, err := scratchdb.New(ctx, serverURL, true)
	if err != nil {
		return lockoracle.Result{}, err
	}
	defer func() { _ = drop() }()
	return lockoracle.Run(ctx, lockoracle.Config{
		Bin: bin, URL: url, Procs: procs, Acquisitions: n, TTL: time.Second,
		Kills: kills, Terminates: kills, Timeout: 30 * time.Minute,
	})
}

// lockResults are the lock_* keys of bench/results.json.
type lockResults struct {
	LockHandoverP99MS *float64 `json:"lock_handover_p99_ms"`
	LockOverlaps      *float64 `json:"lock_overlaps"`
	LockAcquisitions  *float64 `json:"lock_acquisitions"`
	LockKillFreeMSMax *float64 `json:"lock_kill_free_ms_max"`
	LockKillNextMSMax *float64 `json:"lock_kill_next_holder_ms_max"`
}

// lockStep is -mode all's (and quick's) lock bench: 16 processes, n
// acquisitions, kills kill -9 of the holder and as many terminations of its
// sessions (full run: 10,000 and 10; quick: 1,000 and 3).
func lockStep(ctx context.Context, serverURL string, n, kills int) (lockResults, error) {
	r, err := lockBench(ctx, serverURL, 16, n, kills)
	if err != nil {
		return lockResults{}, err
	}
	res := lockResults{
		LockHandoverP99MS: ptr(r.HandoverP99MS),
		LockOverlaps:      ptr(float64(r.Overlaps)),
		LockAcquisitions:  ptr(float64(r.Acquisitions)),
	}
	if len(r.KillFreeMS) > 0 {
		res.LockKillFreeMSMax = ptr(slices.Max(r.KillFreeMS))
		res.LockKillNextMSMax = ptr(slices.Max(r.KillNextMS))
	}
	return res, nil
}
