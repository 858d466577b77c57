package periodic

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/capability"
)

// Capability is a ferry server's schedules (capability.Build): the
// durable ones on the leader, the local ones in every process.
type Capability struct {
	schedules []Schedule
	sched     *Scheduler
}

// NewCapability validates schedules (Go's and the config file's) and
// returns the capability.
func NewCapability(schedules []Schedule) (*Capability, error) {
	valid, err := ValidateSchedules(schedules)
	if err != nil {
		return nil, err
	}
	return &Capability{schedules: valid}, nil
}

// Name is "schedules".
func (*Capability) Name() string { return "schedules" }

// Scheduler is the capability's Scheduler, once built.
func (c *Capability) Scheduler() *Scheduler { return c.sched }

// Build records the Scheduler: its local schedules as a service beside
// River, its durable ones as the leader runnable "periodic", which
// inserts each tick's job through the server's River client.
func (c *Capability) Build(b *capability.Build) error {
	sched, err := New(Config{
		Pool:       b.Pool,
		Inserter:   serverInserter{b},
		Leader:     b.Elector,
		Schedules:  c.schedules,
		Logger:     b.Logger,
		Registerer: b.Metrics,
	})
	if err != nil {
		return err
	}
	c.sched = sched
	b.Service(sched)
	if sched.Durable() {
		b.Leader("periodic", sched.Run)
	}
	return nil
}

// serverInserter inserts through the server's River client, which exists
// by the time a tick is due.
type serverInserter struct{ b *capability.Build }

func (i serverInserter) InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	return i.b.River().InsertManyTx(ctx, tx, params)
}
