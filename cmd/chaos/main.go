// Command chaos is ferry's fault-injection suite: three worker processes on
// one Postgres under steady load (jobs with once-only effects inserted in
// producer transactions, outbox messages written with plain SQL to a real
// HTTP receiver, a schedule ticking every second), and five faults in
// sequence with recovery between them:
//
//  1. kill -9 of the leader;
//  2. pg_terminate_backend of the leader's lock connection;
//  3. a rolling SIGTERM restart of all three workers;
//  4. pg_terminate_backend of every ferry backend at once;
//  5. a Postgres restart (of a cluster of its own, started for the run;
//     skipped with the reason where that cannot be done).
//
// At the end an oracle checks, and prints as a table, that there were never
// two leaders (holder count sampled every 100 ms; leader runs never overlap
// in time), that every job's effect and every outbox message's effect
// happened exactly once with none lost, that every tick of the window is
// recorded exactly once, and the failover gap of each fault. The oracle fails
// closed: a check whose query fails, or whose observation is empty (no run,
// no job, no tick, no holder sampled), fails as unverified. It exits 1 on any
// failed check. Loopback only; it stops by itself.
//
// Two steps stand in for machinery that works on a longer time scale than
// the suite's, and the table counts both: jobs that a killed worker left
// running are put back to available with an UPDATE (a stand-in for River's
// rescuer, which waits an hour, until ferry's liveness rescue lands), and
// retries waiting on their backoff are brought forward.
//
//	go run ./cmd/chaos           # the full run, a few minutes
//	go run ./cmd/chaos -short    # what CI runs
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"time"
)

func main() {
	short := flag.Bool("short", false, "shorter steady phases between faults (CI)")
	serverURL := flag.String("database-url", os.Getenv("TEST_DATABASE_URL"), "server to use when a cluster of the suite's own cannot be started")
	flag.Parse()
	if *serverURL == "" {
		*serverURL = "postgres://ferry:ferry@127.0.0.1:5432/ferry?sslmode=disable"
	}
	steady := 15 * time.Second
	if *short {
		steady = 6 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	ok, err := run(ctx, *serverURL, steady)
	if err != nil {
		log.Fatalf("chaos: %v", err)
	}
	if !ok {
		fmt.Println("chaos: FAILED: see the checks above")
		os.Exit(1)
	}
	fmt.Println("chaos: all guarantees held")
}
