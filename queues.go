package ferry

import (
	"fmt"
	"maps"

	"github.com/ferryq/ferry/internal/config"
	"github.com/ferryq/ferry/internal/queuecap"
	"github.com/ferryq/ferry/outbox"
)

// applyFileQueues merges the config file's `queues:` entries into cfg: an
// entry's workers set the queue's worker count (over FERRY_QUEUES), its
// max_length the queue's bound (over FERRY_QUEUE_MAX_LENGTH). A bound that
// Config.Queues.MaxLengths gives otherwise is a conflict.
func applyFileQueues(cfg *Config, queues []config.Queue) error {
	if len(queues) == 0 {
		return nil
	}
	cfg.Queues.Workers = maps.Clone(cfg.Queues.Workers)
	cfg.Queues.MaxLengths = maps.Clone(cfg.Queues.MaxLengths)
	if cfg.Queues.MaxLengths == nil {
		cfg.Queues.MaxLengths = map[string]int64{}
	}
	for _, q := range queues {
		if q.Workers > 0 {
			if err := queuecap.CheckQueue(q.Name, q.Workers); err != nil {
				return fmt.Errorf("queues: %w", err)
			}
			cfg.Queues.Workers[q.Name] = q.Workers
		}
		if q.MaxLength == nil {
			continue
		}
		if n, ok := cfg.Queues.MaxLengths[q.Name]; ok && n != *q.MaxLength {
			return fmt.Errorf("queues: queue %q: the config file bounds it to %d, ferry.Config.Queues.MaxLengths to %d", q.Name, *q.MaxLength, n)
		}
		cfg.Queues.MaxLengths[q.Name] = *q.MaxLength
	}
	return nil
}

// queueWorkers is the worker count of every queue this process works:
// its Queues, and the queue of each route it delivers (RouteWorkers).
func queueWorkers(queues QueueWorkers, delivered *outbox.Routes) map[string]int {
	workers := maps.Clone(queues)
	for _, r := range delivered.All() {
		workers[outbox.QueueFor(r.Name)] = RouteWorkers(r, queues[outbox.Queue])
	}
	return workers
}
