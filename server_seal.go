package ferry

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/seal"
)

// sealNotReadyFor is how long after a job was refused for a missing seal
// /readyz fails: long enough for a deploy or an operator to see it.
const sealNotReadyFor = 15 * time.Minute

// armSeal arms the database's claim of sealed jobs' run ids when this
// worker has keys (seal.Arm), and says at start whether jobs are sealed
// (logSeal).
func (s *Server) armSeal(ctx context.Context) error {
	if s.verifier != nil {
		armed, err := seal.Arm(ctx, s.pool)
		if err != nil {
			return err
		}
		if armed {
			s.cfg.Logger.Info("seal: the database now claims the run ids of sealed jobs as they are written")
		}
	}
	s.logSeal(ctx)
	return nil
}

// logSeal says at start whether jobs are sealed. Without keys it is the
// contract warning. With keys it counts the unsealed jobs among the next
// 1000 available jobs of each of this worker's queues: each will be
// refused, and some inserter then runs without FERRY_SEAL_KEYS.
func (s *Server) logSeal(ctx context.Context) {
	log := s.cfg.Logger
	if s.verifier == nil {
		log.Warn("seal: jobs are not sealed; whoever can write river_job can run any registered kind with any args")
		return
	}
	var waiting int
	queues := make([]string, 0, len(s.cfg.Queues))
	for q := range s.cfg.Queues {
		queues = append(queues, q)
	}
	queues = append(queues, s.routes.Queues()...)
	// The next jobs of each queue in River's fetch order, through its
	// fetch index: a bounded read before River starts, however long the
	// backlog (counting every waiting job read all of it).
	err := s.pool.QueryRow(ctx, `
		SELECT count(*) FROM unnest($1::text[]) AS q(name), LATERAL (
			SELECT tags, metadata FROM river_job
			WHERE state = 'available' AND queue = q.name
			ORDER BY priority, scheduled_at, id
			LIMIT 1000) AS next
		WHERE NOT ferry_sealed(next.tags, next.metadata)`, queues).Scan(&waiting)
	if err != nil {
		log.Warn("seal: could not count unsealed waiting jobs", "error", err)
	}
	log.Info("seal: jobs are sealed and verified",
		"key_ids", s.cfg.SealKeys.IDs(), "replay_window", s.cfg.SealReplayWindow, "unsealed_waiting", waiting)
	if waiting > 0 {
		log.Warn("seal: unsealed jobs are waiting and will be refused; an inserter runs without FERRY_SEAL_KEYS, or jobs were planted",
			"unsealed_waiting", waiting)
	}
}

// sealReady fails /readyz for sealNotReadyFor after a job was refused for a
// missing seal.
func (s *Server) sealReady() error {
	if s.verifier == nil {
		return nil
	}
	last := s.verifier.LastMissing()
	if last.IsZero() || time.Since(last) > sealNotReadyFor {
		return nil
	}
	return fmt.Errorf("seal: %d jobs refused for a missing seal, the last at %s: an inserter runs without FERRY_SEAL_KEYS, or jobs were planted",
		s.verifier.Refused(seal.ReasonMissing), last.UTC().Format(time.RFC3339))
}

// sealCollector exports ferry_seal_refused_total{reason}.
type sealCollector struct{ v *seal.Verifier }

var sealRefusedDesc = prometheus.NewDesc("ferry_seal_refused_total",
	"Jobs this worker refused to run because of their seal, by reason (missing, invalid, queue, replayed, stale).",
	[]string{"reason"}, nil)

func (c sealCollector) Describe(ch chan<- *prometheus.Desc) { ch <- sealRefusedDesc }

func (c sealCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range seal.Reasons {
		ch <- prometheus.MustNewConstMetric(sealRefusedDesc, prometheus.CounterValue, float64(c.v.Refused(r)), string(r))
	}
}
