// Command chaos is ferry's fault-injection suite: three worker processes on
// one Postgres under steady load (jobs with once-only effects inserted in
// producer transactions, one in ten of them a long one of a few seconds,
// and three marathon jobs that run through every fault and past it, ten
// minutes (thirty seconds with -short) with no job timeout, outbox messages written with plain SQL to a real HTTP receiver, a
// schedule ticking every second), and thirteen faults in sequence with
// recovery between them:
//
//  1. same-key outbox writers, from then on to the end of the window:
//     three ordering keys, each written in rounds by two writers whose
//     transactions overlap and commit out of id order (writer 1 inserts
//     and holds its transaction open, writer 2 inserts the same key and
//     commits, then writer 1 commits), with plain SQL, to the receiver,
//     which counts each key's deliveries in flight;
//  2. kill -9 of the leader;
//  3. pg_terminate_backend of the leader's lock connection;
//  4. pg_terminate_backend of a standby's liveness session alone
//     (application_name ferry-liveness:<host>:<pid>), thirty times 0.1 to
//     0.4 s apart, while it runs long jobs;
//  5. SIGSTOP of a standby running long jobs, for less than its liveness
//     lease (three ticks plus the tick timeout), then SIGCONT;
//  6. SIGSTOP of a standby running long jobs past its lease (by two
//     ticks), then SIGCONT;
//  7. a standby stopped (SIGTERM) and replaced by a worker whose sessions
//     reach Postgres through proxies that lose the reply to their first
//     COMMIT, its registration's (netproxy's DropReplyTo: the row and the
//     lock committed, the connection ended);
//  8. a network partition of the leader: every connection it has to
//     Postgres blackholed both ways, nothing closed, for its lease and four
//     ticks, then healed (each worker reaches Postgres through TCP proxies
//     of its own, internal/testkit/netproxy);
//  9. a network partition, the same, of a standby running long jobs;
//  10. a rolling SIGTERM restart of all three workers;
//  11. pg_terminate_backend of every ferry backend at once;
//  12. a Postgres restart (of a cluster of its own, started for the run;
//     skipped with the reason where that cannot be done);
//  13. a primary failover: the suite's cluster is a primary and a
//     synchronous streaming standby (pg_basebackup), every client reaches
//     them through a multi-host URL with target_session_attrs=read-write;
//     the primary is crashed (pg_ctl stop -m immediate) under load and the
//     standby promoted, and the fault table shows when every worker had
//     started a job on it again (skipped with -pgbouncer, whose PgBouncer
//     stands in front of one host).
//
// Faults 2, 6, 8, 9, 11, 12 and 13 end workers' liveness sessions (a
// partition or a pause through the server's lease: Postgres ends a
// session silent that long), so the leader's rescuer may declare those
// workers dead and take their running jobs back: a killed one is gone,
// and one whose sessions were ended stops itself when it learns it (exit
// code 1); the suite starts another in its place, as an orchestrator
// would. Fault 4 ends a liveness session too, but nothing else of the
// worker's: its pool's sessions stay connected and its heartbeat recent,
// so it must be spared. Nothing else is done for the jobs: no UPDATE by
// the harness, the rescues are ferry's own and the retries River's.
//
// At the end an oracle checks, and prints as a table, that there were never
// two leaders (holder count sampled every 100 ms; leader runs never overlap
// in time; each run's term above every earlier one's, across the
// failover); that every job's effect happened at least once and never twice
// (an effect commits with its job's completion), and every outbox message's
// exactly once, with none lost; that of each ordering key never two
// deliveries were in flight at the receiver at once and every keyed
// message was received once (none received fails as unverified; how
// many first arrived before a message their writer committed earlier is
// shown, not judged: the relay cannot tell the commit order of two
// messages committed before it saw either); that every job inserted by the end of the
// run is finalized (completed, or discarded or cancelled with its reason
// shown); that every marathon job completed at its time, not before;
// that every tick of the window is recorded exactly once; that no
// job was rescued from a live worker (every worker declared dead while it
// ran had its liveness session ended by the harness just before: killed,
// its sessions terminated, Postgres restarted, cut off or stopped past its
// lease; never one stopped gracefully, SIGSTOPped within its lease, or
// whose liveness session alone was ended; and every killed one was
// declared dead); that the worker whose liveness session was ended again
// and again, and the one SIGSTOPped within its lease, were not declared
// dead, had no job rescued from them and did not exit; that the worker
// SIGSTOPped past its lease and the partitioned standby were each
// declared dead, their jobs rescued and completed elsewhere, and exited
// with code 1, declared dead (their late completions are refused by the
// fence, which the effects check would see); that the worker whose
// registration reply was lost logged its failed registration, then
// registered, was not declared dead, started jobs and did not exit; that
// the partitioned leader stopped leading within a tick and its timeout
// (plus a margin of 500 ms) by its own clock; and that workers
// exited only when stopped, killed, or declared dead after their sessions
// ended; and that workflows run through the faults (diamonds, wide
// fan-outs and their fan-ins, chains, steps added at run time with a
// fan-in after them, all inserted at the window's start; a few diamonds
// cancelled two seconds later, a step of each running) ended in the state
// their steps imply, every step of the others completed, no step started
// before each of its dependencies had completed or without a completed
// dependency's output (chaos.step checks both at its start, from the
// committed rows), and no step of a cancelled workflow was fetched after
// the cancel committed; and that debounced inserts (five keys, each
// inserted every 50 to 250 ms through the window, a 100 ms window, each
// run 150 ms) never ran two jobs of a key at once (chaos.debounced counts,
// at its start, the other jobs of its key River shows running) and ran
// each key's last committed insert; and that jobs under a concurrency
// limit of 2 per tenant (three tenants, each inserting three jobs of
// 300 ms every 0.9 s) never started while their tenant had 2 running
// (chaos.limited counts them at its start, a killed worker's among them
// until rescued) and all completed. The fault table shows each fault's
// failover gap and the workers declared dead after it, with the jobs
// rescued from them. The oracle fails closed: a check whose query fails,
// or whose observation is empty (no run, no job, no tick, no holder
// sampled, no worker recorded, no workflow inserted or no step started,
// no debounced or limited insert or run, no worker killed or stopped, no
// keyed message received, no liveness session found to end, no failed
// registration), fails as unverified. It
// exits 1 on any failed check. Loopback only; it stops by itself.
//
//	go run ./tools/chaos           # the full run, 12 minutes (the marathon jobs')
//	go run ./tools/chaos -short    # what CI runs
//	go run ./tools/chaos -short -pgbouncer  # the same, job traffic through PgBouncer
//
// With -pgbouncer, a PgBouncer in transaction mode (Debian's, started for
// the run) stands in front of the run's database: the workers run with
// FERRY_POOLER=transaction, their job traffic through it and their
// sessions (leader lock, liveness, LISTEN) direct, and the producers
// insert jobs and outbox rows through it. The oracle is the same.
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
	pooled := flag.Bool("pgbouncer", false, "send all job traffic (workers' and producers') through a PgBouncer in transaction mode started for the run")
	serverURL := flag.String("database-url", os.Getenv("TEST_DATABASE_URL"), "server to use when a cluster of the suite's own cannot be started")
	flag.Parse()
	if *serverURL == "" {
		*serverURL = "postgres://ferry:ferry@127.0.0.1:5432/ferry?sslmode=disable"
	}
	steady, marathon := 15*time.Second, 10*time.Minute
	if *short {
		steady, marathon = 6*time.Second, 30*time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), marathon+12*time.Minute)
	defer cancel()
	ok, err := run(ctx, *serverURL, steady, marathon, *pooled)
	if err != nil {
		log.Fatalf("chaos: %v", err)
	}
	if !ok {
		fmt.Println("chaos: FAILED: see the checks above")
		os.Exit(1)
	}
	fmt.Println("chaos: all guarantees held")
}
