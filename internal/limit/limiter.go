package limit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Defaults of Config.
const (
	// DefaultLead is how far ahead a claim takes a rate's turns: jobs
	// whose turn comes within it are claimed now and wait out the rest in
	// process, so that a fetch (one poll interval) later the next ones are
	// taken before their turn has passed.
	DefaultLead = 100 * time.Millisecond
	// DefaultSweepInterval is how often the leader's sweep mends what no
	// claim does (see Sweep).
	DefaultSweepInterval = time.Second
)

// leadFactor stretches the lead past the poll interval it is set to: a
// River poll comes up to a tenth of an interval late (its jitter), and
// turns claimed up to the next poll would leave that tenth unused.
const leadFactor = 1.25

// Config configures a Limiter.
type Config struct {
	Pool   *pgxpool.Pool
	Limits []Limit
	// Schema is River's schema; "" for the search_path's.
	Schema string
	// Lead: see DefaultLead. Set it to the workers' fetch poll interval.
	Lead time.Duration
	// SweepInterval: see DefaultSweepInterval.
	SweepInterval time.Duration
	Logger        *slog.Logger
}

// Limiter enforces limits on the jobs of one River client: set its Claim
// on the client's pilot, install its Middleware, run Run on every worker
// and Sweep on the leader.
type Limiter struct {
	pool    *pgxpool.Pool
	limits  []Limit
	byName  map[string]*Limit
	byKind  map[string][]*Limit
	byQueue map[string][]*Limit
	// fair holds the fair queues' gates, by queue.
	fair   map[string]*fairQueue
	schema string
	lead   time.Duration
	sweep  time.Duration
	logger *slog.Logger

	// reactivatedAll and reactivatedLate are when the sweep last looked
	// at every drained gate, and at those of the last reactivateLate.
	reactivatedAll, reactivatedLate time.Time

	// turns holds the rate turns of the jobs this process claimed ahead
	// of their turn: job id to the local time it may start.
	turns sync.Map
}

// New checks the limits (names unique, each entry whole) and returns a
// Limiter. Limits without a name get DefaultName.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{
		pool: cfg.Pool, schema: cfg.Schema,
		byName: map[string]*Limit{}, byKind: map[string][]*Limit{}, byQueue: map[string][]*Limit{},
		fair:   map[string]*fairQueue{},
		lead:   time.Duration(float64(cmp.Or(cfg.Lead, DefaultLead)) * leadFactor),
		sweep:  cmp.Or(cfg.SweepInterval, DefaultSweepInterval),
		logger: cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
	}
	seen := map[string]bool{}
	for _, lim := range cfg.Limits {
		lim.Name = cmp.Or(lim.Name, DefaultName(lim))
		if field, err := lim.Check(); err != nil {
			return nil, fmt.Errorf("limit %q: %s: %w", lim.Name, field, err)
		}
		if seen[lim.Name] {
			return nil, fmt.Errorf("limit %q: name: given twice", lim.Name)
		}
		seen[lim.Name] = true
		l.limits = append(l.limits, lim)
	}
	for i := range l.limits {
		lim := &l.limits[i]
		l.byName[lim.Name] = lim
		switch {
		case lim.Fair != nil:
			if l.fair[lim.Queue] != nil {
				return nil, fmt.Errorf("limit %q: queue: a second fairness for queue %q", lim.Name, lim.Queue)
			}
			l.fair[lim.Queue] = newFairQueue(lim)
			l.byQueue[lim.Queue] = append(l.byQueue[lim.Queue], lim)
		case lim.Kind != "":
			l.byKind[lim.Kind] = append(l.byKind[lim.Kind], lim)
		default:
			l.byQueue[lim.Queue] = append(l.byQueue[lim.Queue], lim)
		}
	}
	return l, nil
}

// Limits returns the limits, with their names.
func (l *Limiter) Limits() []Limit { return slices.Clone(l.limits) }

// Middleware returns the River worker middleware that holds a job claimed
// ahead of its rate turn until the turn comes. Install it outside the
// middleware that should not see a waiting job (metrics, traces).
func (l *Limiter) Middleware() rivertype.Middleware { return &middleware{l: l} }

type middleware struct {
	river.MiddlewareDefaults
	l *Limiter
}

var _ rivertype.WorkerMiddleware = (*middleware)(nil)

func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if v, ok := m.l.turns.LoadAndDelete(job.ID); ok {
		if wait := time.Until(v.(time.Time)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				// Stopping before its turn: it parks again (its turn is
				// spent, so it may come later, never sooner).
				return river.JobSnooze(0)
			}
		}
	}
	return doInner(ctx)
}
