package ferry

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/metrics"
)

// RelayInserterForTest returns the River client the relay inserts its
// delivery jobs with.
func (s *Server) RelayInserterForTest() *river.Client[pgx.Tx] { return s.build.InsertOnly() }

// AppendServiceForTest adds a service that Run starts after the others, so
// that a test can make a start fail after River started.
func (s *Server) AppendServiceForTest(start func(context.Context) error, stop func()) {
	s.build.Service(funcService{start: start, stop: stop})
}

type funcService struct {
	start func(context.Context) error
	stop  func()
}

func (f funcService) Start(ctx context.Context) error { return f.start(ctx) }
func (f funcService) Stop()                           { f.stop() }

// MetricsForTest returns the server's Prometheus registry.
func (s *Server) MetricsForTest() *metrics.Registry { return s.metrics.Registry }
