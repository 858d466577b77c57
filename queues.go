package ferry

import (
	"fmt"
	"maps"
	"slices"

	"github.com/ferryq/ferry/internal/config"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
)

// applyFileQueues merges the config file's `queues:` entries into cfg: an
// entry's workers set the queue's worker count (over FERRY_QUEUES), its
// max_length the queue's bound (over FERRY_QUEUE_MAX_LENGTH). A bound that
// Config.MaxLengths gives otherwise is a conflict.
func applyFileQueues(cfg *Config, queues []config.Queue) error {
	if len(queues) == 0 {
		return nil
	}
	cfg.Queues = maps.Clone(cfg.Queues)
	cfg.MaxLengths = maps.Clone(cfg.MaxLengths)
	if cfg.MaxLengths == nil {
		cfg.MaxLengths = map[string]int64{}
	}
	for _, q := range queues {
		if q.Workers > 0 {
			if err := validateQueue(q.Name, q.Workers); err != nil {
				return fmt.Errorf("queues: %w", err)
			}
			cfg.Queues[q.Name] = q.Workers
		}
		if q.MaxLength == nil {
			continue
		}
		if n, ok := cfg.MaxLengths[q.Name]; ok && n != *q.MaxLength {
			return fmt.Errorf("queues: queue %q: the config file bounds it to %d, ferry.Config.MaxLengths to %d", q.Name, *q.MaxLength, n)
		}
		cfg.MaxLengths[q.Name] = *q.MaxLength
	}
	return nil
}

// queueWorkers is the worker count of every queue this process works:
// its Queues, and the queue of each route it delivers (RouteWorkers).
func queueWorkers(queues map[string]int, delivered *outbox.Routes) map[string]int {
	workers := maps.Clone(queues)
	for _, r := range delivered.All() {
		workers[outbox.QueueFor(r.Name)] = RouteWorkers(r, queues[outbox.Queue])
	}
	return workers
}

// queueBounds is the bound and worker count (queueWorkers) of every queue
// this process works or bounds, as SetQueueBounds records them.
func queueBounds(cfg Config, workers map[string]int) []jobs.QueueBound {
	names := slices.Collect(maps.Keys(workers))
	for q := range cfg.MaxLengths {
		if _, ok := workers[q]; !ok {
			names = append(names, q)
		}
	}
	slices.Sort(names)
	out := make([]jobs.QueueBound, 0, len(names))
	for _, q := range names {
		bound, ok := cfg.MaxLengths[q]
		if !ok {
			bound = cfg.QueueMaxLength
		}
		out = append(out, jobs.QueueBound{Name: q, MaxLength: bound, Workers: workers[q]})
	}
	return out
}
