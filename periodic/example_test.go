package periodic_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/periodic"
)

// A cron entry at a wall time that a DST change skips fires once, an hour
// later; one at a wall time that repeats fires once, at its first
// occurrence.
func ExampleParseCron() {
	c, err := periodic.ParseCron("30 2 * * *", "Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		log.Fatal(err)
	}
	for _, after := range []time.Time{
		time.Date(2026, 3, 28, 12, 0, 0, 0, berlin),  // the night clocks go forward
		time.Date(2026, 10, 24, 12, 0, 0, 0, berlin), // the night clocks go back
	} {
		next := c.Next(after)
		fmt.Println(next.Format(time.RFC3339), "then", c.Next(next).Format(time.RFC3339))
	}
	// Output:
	// 2026-03-29T03:30:00+02:00 then 2026-03-30T02:30:00+02:00
	// 2026-10-25T02:30:00+02:00 then 2026-10-26T02:30:00+01:00
}

// CacheWarmArgs are the args of the job the schedule enqueues.
type CacheWarmArgs struct{}

// Kind implements river.JobArgs.
func (CacheWarmArgs) Kind() string { return "cache.warm" }

// The scheduler runs on the leader only (a runnable of an election), and
// turns every tick of a schedule into one River job. A ferry server does
// this wiring itself: give it the schedules in ferry.Config.Schedules.
func ExampleScheduler() {
	ctx := context.Background()
	pool := examplePool()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		log.Fatal(err)
	}
	quiet := slog.New(slog.DiscardHandler)
	elector, err := election.New(election.Config{DatabaseURL: exampleDatabaseURL(), Logger: quiet})
	if err != nil {
		log.Fatal(err)
	}

	sched, err := periodic.New(periodic.Config{
		Pool: pool, Inserter: inserter, Leader: elector, Logger: quiet,
		Schedules: []periodic.Schedule{
			{ID: "cache-warm", Trigger: periodic.Every(200 * time.Millisecond), Args: CacheWarmArgs{}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	elector.Register("periodic", sched.Run)
	if err := elector.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer elector.Stop()

	row := waitTick(ctx, pool, "cache-warm")
	fmt.Println(row.ID, row.Trigger, row.Kind, "job", *row.LastJobState)
	// Output: cache-warm every 200ms cache.warm job available
}

// waitTick waits, for at most ten seconds, until schedule id has a job,
// and returns its row.
func waitTick(ctx context.Context, pool *pgxpool.Pool, id string) periodic.Row {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		rows, err := periodic.List(ctx, pool)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range rows {
			if r.ID == id && r.LastJobID != nil {
				return r
			}
		}
	}
	log.Fatalf("schedule %s enqueued no job in 10s", id)
	return periodic.Row{}
}

// exampleDatabaseURL is this package's test database, for runnable
// examples, which get no *testing.T.
func exampleDatabaseURL() string { return pgtest.ExampleURL() }

// examplePool stands for the service's own pool: here, on this package's
// test database.
func examplePool() *pgxpool.Pool { return pgtest.ExamplePool() }
