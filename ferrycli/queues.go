package ferrycli

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/jobs"
)

// shownFairKeys is how many keys of a fair queue the table lists (the
// busiest); --json lists them all.
const shownFairKeys = 20

func enqueueQueues() *cli.Command {
	return &cli.Command{
		Name:  "queues",
		Usage: "list the queues with their jobs by state, their bound and their workers",
		Description: `Lists every queue that has jobs waiting or running, a bound, or a worker.
LENGTH is what the bound limits: the jobs available, scheduled, retryable,
pending and running. MAX LENGTH is the bound ("-": none); a queue at its
bound refuses inserts (enqueue job and bulk exit 3, as do jobs retry and
dead retry into a full queue). WORKERS is the worker
count that the last worker started with the queue recorded.

A fair queue (fairness: in the workers' config files) is listed again
below, with its key field and its 20 busiest keys: each key's WEIGHT, the
jobs WAITING (parked behind the key's gate) and RUNNING, and the jobs
STARTED from it since its gate was made (a key idle for a day starts
again from 0). --json gives a fair queue a "fairness" with every key.

Examples:
   enqueue queues
   enqueue queues --json`,
		Flags:  []cli.Flag{databaseURLFlag(), jsonFlag()},
		Action: runQueues,
	}
}

// queueJSON is a queue in --json's output: jobs.QueueInfo, and the
// queue's fairness when it has one.
type queueJSON struct {
	jobs.QueueInfo
	Fairness *fairJSON `json:"fairness,omitempty"`
}

type fairJSON struct {
	Key           string             `json:"key"`
	Weights       map[string]float64 `json:"weights"`
	DefaultWeight float64            `json:"default_weight"`
	fairUseJSON                      // totals over the keys
	SeenAt        time.Time          `json:"seen_at"`
	Keys          []fairKeyJSON      `json:"keys"`
}

type fairKeyJSON struct {
	Key    string  `json:"key"`
	Weight float64 `json:"weight"`
	fairUseJSON
}

// fairUseJSON is a fair queue's or key's jobs running, waiting and
// started.
type fairUseJSON struct {
	Running int   `json:"running"`
	Waiting int   `json:"waiting"`
	Started int64 `json:"started"`
}

func runQueues(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("queues takes no arguments, got %q", c.Args().First())
	}
	var (
		qs []jobs.QueueInfo
		fs []limit.FairStatus
	)
	err := withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		if qs, err = jobs.ListQueues(ctx, pool); err != nil {
			return err
		}
		fs, err = limit.ListFair(ctx, pool)
		return err
	})
	if err != nil {
		return err
	}
	qs = withFairQueues(qs, fs)
	out := outputFrom(c)
	if out.json {
		fair := map[string]*fairJSON{}
		for _, f := range fs {
			fair[f.Queue] = fairnessJSON(f)
		}
		js := make([]queueJSON, 0, len(qs))
		for _, q := range qs {
			js = append(js, queueJSON{QueueInfo: q, Fairness: fair[q.Name]})
		}
		return out.JSON(js)
	}
	header := []string{"QUEUE"}
	for _, s := range jobs.CountedStates {
		header = append(header, strings.ToUpper(s))
	}
	header = append(header, "LENGTH", "MAX LENGTH", "WORKERS")
	table := make([][]string, 0, len(qs))
	for _, q := range qs {
		row := []string{q.Name}
		for _, s := range jobs.CountedStates {
			row = append(row, strconv.FormatInt(q.Counts[s], 10))
		}
		maxLength, workers := "-", "-"
		if q.MaxLength != nil {
			maxLength = strconv.FormatInt(*q.MaxLength, 10)
		}
		if q.Workers != nil {
			workers = strconv.Itoa(*q.Workers)
		}
		table = append(table, append(row, strconv.FormatInt(q.Length, 10), maxLength, workers))
	}
	if err := out.Table(header, table); err != nil || len(fs) == 0 {
		return err
	}
	if _, err := out.w.Write([]byte("\n")); err != nil {
		return err
	}
	return out.Table([]string{"FAIR QUEUE", "KEY", "WEIGHT", "WAITING", "RUNNING", "STARTED"}, fairTable(fs))
}

// withFairQueues adds to qs, in order, the fair queues it lacks (no job,
// bound or River client yet), with their counts 0.
func withFairQueues(qs []jobs.QueueInfo, fs []limit.FairStatus) []jobs.QueueInfo {
	for _, f := range fs {
		if slices.ContainsFunc(qs, func(q jobs.QueueInfo) bool { return q.Name == f.Queue }) {
			continue
		}
		q := jobs.QueueInfo{Name: f.Queue, Counts: map[string]int64{}}
		for _, s := range jobs.CountedStates {
			q.Counts[s] = 0
		}
		i, _ := slices.BinarySearchFunc(qs, q.Name, func(q jobs.QueueInfo, name string) int { return strings.Compare(q.Name, name) })
		qs = slices.Insert(qs, i, q)
	}
	if qs == nil {
		qs = []jobs.QueueInfo{}
	}
	return qs
}

func fairnessJSON(f limit.FairStatus) *fairJSON {
	j := &fairJSON{
		Key: f.KeyField, Weights: f.Weights, DefaultWeight: f.Default(),
		fairUseJSON: fairUseJSON{Running: f.Running, Waiting: f.Waiting}, SeenAt: f.SeenAt,
		Keys: make([]fairKeyJSON, 0, len(f.Keys)),
	}
	if j.Weights == nil {
		j.Weights = map[string]float64{}
	}
	for _, k := range f.Keys {
		j.Started += k.Started
		j.Keys = append(j.Keys, fairKeyJSON{Key: k.Key, Weight: k.Weight,
			fairUseJSON: fairUseJSON{Running: k.Running, Waiting: k.Waiting, Started: k.Started}})
	}
	return j
}

// fairTable is the fair queues' rows: a queue's key field and totals
// (its WEIGHT the default weight), then its busiest keys.
func fairTable(fs []limit.FairStatus) [][]string {
	weight := func(w float64) string { return strconv.FormatFloat(w, 'g', -1, 64) }
	var table [][]string
	for _, f := range fs {
		var started int64
		for _, k := range f.Keys {
			started += k.Started
		}
		table = append(table, []string{f.Queue, f.KeyField, "default " + weight(f.Default()),
			strconv.Itoa(f.Waiting), strconv.Itoa(f.Running), strconv.FormatInt(started, 10)})
		for i, k := range f.Keys {
			if i == shownFairKeys {
				table = append(table, []string{"", "… and " + strconv.Itoa(len(f.Keys)-shownFairKeys) + " more keys"})
				break
			}
			table = append(table, []string{"", "= " + strconv.Quote(k.Key), weight(k.Weight),
				strconv.Itoa(k.Waiting), strconv.Itoa(k.Running), strconv.FormatInt(k.Started, 10)})
		}
	}
	return table
}
