package election_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

// Two processes campaign for the same database; the leader runs the
// registered runnables until it stops, and a standby takes over at once
// when the leader resigns.
func Example() {
	leading := make(chan string)
	campaign := func(name string) *election.Elector {
		e, err := election.New(election.Config{
			DatabaseURL: exampleDatabaseURL(),
			Logger:      slog.New(slog.DiscardHandler),
		})
		if err != nil {
			log.Fatal(err)
		}
		e.Register("nightly-report", func(ctx context.Context) error {
			leading <- name
			<-ctx.Done() // runs while this process leads
			return nil
		})
		if err := e.Start(context.Background()); err != nil {
			log.Fatal(err)
		}
		return e
	}

	a := campaign("a")
	fmt.Println(<-leading, "leads")

	b := campaign("b")
	defer b.Stop()
	waitState(b, election.StateStandby)
	fmt.Println("b:", b.Status().State)

	a.Stop() // resigns: runnables stopped, lock released, standbys told
	fmt.Println(<-leading, "leads")

	// Output:
	// a leads
	// b: standby
	// b leads
}

// waitState waits, for at most ten seconds, until e is in state s.
func waitState(e *election.Elector, s election.State) {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if e.Status().State == s {
			return
		}
	}
	log.Fatalf("elector is %s after 10s, not %s", e.Status().State, s)
}

// exampleDatabaseURL is this package's test database, for runnable
// examples, which get no *testing.T.
func exampleDatabaseURL() string { return pgtest.ExampleURL() }
