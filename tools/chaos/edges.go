package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"time"

	"github.com/ferryq/ferry/internal/testkit/fleet"
)

// The faults at liveness's edges: a live worker's liveness session killed
// again and again, a worker paused past its lease, a registration whose
// COMMIT's reply is lost.

const (
	// livenessKills is how many times the liveness session fault ends a
	// worker's liveness session, livenessKillGap to twice that and more
	// apart.
	livenessKills   = 30
	livenessKillGap = 100 * time.Millisecond
	// pauseFor is how long the pause fault stops a worker: past its lease
	// by two ticks, so that Postgres has ended its silent liveness session
	// and the rescuer has found it before it resumes.
	pauseFor = lease + 2*leaderTick
)

// killLivenessSessions ends, with pg_terminate_backend, the liveness
// session of the standby running the most long jobs, livenessKills times,
// 0.1 to 0.4 s apart: each time, once it holds its lock again, the session
// that holds it (ferry_liveness_namespace(), its ferry_worker.id), named
// ferry-liveness:<host>:<pid> (not a rescuer's transaction that holds it
// for a moment). Its lock is free until it takes it again on a new
// session; its pool's sessions stay connected and its heartbeat recent,
// so the rescuer must leave it alone.
func (s *suite) killLivenessSessions(ctx context.Context) (string, error) {
	p, clientID, running, long, err := s.busyStandby(ctx)
	if err != nil {
		return "", err
	}
	s.expose(exposedLivenessKill, p)
	at := time.Now()
	killed := 0
	for range livenessKills {
		held := time.Now()
		var backend int
		for backend == 0 && time.Since(held) < 5*time.Second {
			err := s.pool.QueryRow(ctx, `SELECT coalesce(max(l.pid), 0) FROM ferry_worker w
				JOIN pg_locks l ON l.locktype = 'advisory' AND l.classid = ferry_liveness_namespace()::int::oid AND l.objid = w.id::oid
					AND l.objsubid = 2 AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				JOIN pg_stat_activity a ON a.pid = l.pid AND a.application_name ~ ('^ferry-liveness:.*:' || w.pid || '( |$)')
				WHERE w.client_id = $1`, clientID).Scan(&backend)
			if err != nil {
				return "", fmt.Errorf("find pid %d's liveness session: %w", p.Pid(), err)
			}
			if backend == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
		if backend == 0 {
			break // it did not take its lock again: the oracle shows what became of it
		}
		var ended bool
		if err := s.pool.QueryRow(ctx, "SELECT pg_terminate_backend($1)", backend).Scan(&ended); err != nil {
			return "", fmt.Errorf("terminate pid %d's liveness session: %w", p.Pid(), err)
		}
		if ended {
			killed++
		}
		time.Sleep(livenessKillGap + rand.N(3*livenessKillGap))
	}
	s.kills = killsObs{sparedObs: sparedObs{pid: p.Pid(), clientID: clientID, at: at, running: running, long: long}, kills: killed}
	return fmt.Sprintf("none: pid %d's liveness session ended %d times in %s, running %d jobs, %d long", p.Pid(), killed, time.Since(at).Round(time.Millisecond), running, long), nil
}

// killsObs is the liveness session fault: the worker spared, and how many
// of its liveness sessions the harness ended.
type killsObs struct {
	sparedObs
	kills int
}

// checkKills: a live worker whose liveness session alone is ended again
// and again, while it runs long jobs, is never declared dead, has no job
// rescued from it and does not exit: it takes its lock again each time.
func checkKills(o killsObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameKills, verdictUnverified, "query failed: %v", o.err)
	case o.pid == 0:
		return newCheck(nameKills, verdictUnverified, "no worker's liveness session was ended: nothing to check")
	case o.long == 0:
		return newCheck(nameKills, verdictUnverified, "pid %d had no long job running: nothing to rescue", o.pid)
	case o.kills == 0:
		return newCheck(nameKills, verdictUnverified, "no liveness session of pid %d was found to end", o.pid)
	}
	return o.judge(nameKills, fmt.Sprintf("pid %d's liveness session ended %d times, running %d jobs, %d of them long", o.pid, o.kills, o.running, o.long))
}

// stallWorker stops, with SIGSTOP, the standby worker running the most
// long jobs (busyStandby), for d, then lets it go on with SIGCONT. Under
// its lease (stallFor) it is a stall the worker must come through whole
// (exposedSIGSTOP); past it (pauseFor), a pause that ends its liveness
// session (exposedPause).
func (s *suite) stallWorker(ctx context.Context, d time.Duration) (p *fleet.Proc, o sparedObs, err error) {
	p, clientID, running, long, err := s.busyStandby(ctx)
	if err != nil {
		return nil, o, err
	}
	kind := exposedSIGSTOP
	if d >= lease {
		kind = exposedPause
	}
	s.expose(kind, p)
	o = sparedObs{pid: p.Pid(), clientID: clientID, at: time.Now(), running: running, long: long}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return nil, o, err
	}
	time.Sleep(d)
	return p, o, p.Signal(syscall.SIGCONT)
}

// stall is the SIGSTOP fault under the lease.
func (s *suite) stall(ctx context.Context) (string, error) {
	_, o, err := s.stallWorker(ctx, stallFor)
	if err != nil {
		return "", err
	}
	s.stalled = stallObs{sparedObs: o, stopped: time.Since(o.at), lease: lease}
	return fmt.Sprintf("none: pid %d stopped %s running %d jobs, %d long", o.pid, s.stalled.stopped.Round(time.Millisecond), o.running, o.long), nil
}

// pause is the SIGSTOP fault past the lease: Postgres ends the stopped
// worker's silent liveness session, the rescuer declares it dead and
// rescues its jobs, and the worker, resumed, cancels its jobs (their
// context reads the lease), learns it is dead and stops itself (exit code
// 1); the suite starts another in its place. Its late completions are
// refused by the fence.
func (s *suite) pause(ctx context.Context) (string, error) {
	_, o, err := s.stallWorker(ctx, pauseFor)
	if err != nil {
		return "", err
	}
	s.paused = lostObs{how: "stopped", pid: o.pid, clientID: o.clientID, at: o.at, lasted: time.Since(o.at), running: o.running, long: o.long}
	return fmt.Sprintf("pid %d stopped %s (lease %s) running %d jobs, %d long", o.pid, s.paused.lasted.Round(time.Millisecond), lease.Round(time.Millisecond), o.running, o.long), nil
}

// lostReply stops a standby gracefully and starts another in its place
// whose registration's COMMIT reply is lost on its way (the row and the
// lock committed, the session gone): it must register again on the row it
// wrote, take its lock and work, never declared dead.
func (s *suite) lostReply(ctx context.Context) (string, error) {
	leader, _, err := s.leaderProc(ctx)
	if err != nil {
		return "", err
	}
	var old *fleet.Proc
	for _, p := range s.working() {
		if p != leader {
			old = p
			break
		}
	}
	if old == nil {
		return "", errors.New("no standby to replace")
	}
	s.expose(exposedSIGTERM, old)
	_ = old.Signal(syscall.SIGTERM)
	select {
	case <-old.Done():
	case <-time.After(40 * time.Second):
		return "", fmt.Errorf("pid %d did not stop within 40s of SIGTERM", old.Pid())
	}
	s.mu.Lock()
	p, armed, err := s.startLocked(true)
	s.mu.Unlock()
	if err != nil {
		return "", err
	}
	at := time.Now()
	s.lost = lostReplyObs{pid: p.Pid(), at: at}
	deadline := at.Add(30 * time.Second)
	for !strings.Contains(p.Stderr(), `"msg":"liveness: worker registered"`) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// Disarmed once it registered: a proxy to a host that saw no COMMIT
	// yet (the standby of a multi-host URL) must not lose a later reply.
	for _, x := range armed {
		x.DropReplyTo(nil)
	}
	return fmt.Sprintf("pid %d in place of pid %d, its sessions through proxies that lose the first COMMIT's reply; registered after %s",
		p.Pid(), old.Pid(), time.Since(at).Round(time.Millisecond)), nil
}

// lostReplyObs is the lost registration reply fault: the worker started,
// whether it logged that its registration failed and was tried again
// (the lost reply was its registration's) and then that it registered,
// its ferry_worker row, how many jobs it started, and its exit before the
// harness next did something to it.
type lostReplyObs struct {
	pid               int
	at                time.Time
	retried, register bool
	row               *workerRow
	until             time.Time
	started           int64
	exit              *workerExit
	err               error
}

func observeLostReply(ctx context.Context, s *suite, o lostReplyObs, exps []exposure, rows []workerRow, exits []workerExit) lostReplyObs {
	if o.pid == 0 {
		return o
	}
	for _, p := range s.workers.Procs() {
		if p.Pid() == o.pid {
			log := p.Stderr()
			reg := strings.Index(log, `"msg":"liveness: worker registered"`)
			o.register = reg >= 0
			retry := strings.Index(log, `"msg":"liveness: cannot register this worker yet; trying again"`)
			o.retried = retry >= 0 && (reg < 0 || retry < reg)
		}
	}
	for _, e := range exps {
		if e.at.After(o.at) {
			o.until = e.at
			break
		}
	}
	for _, r := range rows {
		if r.pid == o.pid {
			o.row = &r
		}
	}
	for _, x := range exits {
		if x.pid == o.pid && (o.until.IsZero() || x.at.Before(o.until)) {
			o.exit = &x
		}
	}
	if o.row == nil {
		return o
	}
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE $1 = ANY(attempted_by)`, o.row.clientID).Scan(&o.started); err != nil {
		o.err = fmt.Errorf("count the jobs pid %d started: %w", o.pid, err)
	}
	return o
}

// checkLostReply: a worker whose registration's COMMIT reply is lost
// registers on the row it wrote, is never declared dead, works jobs and
// does not exit (until the harness next does something to it). If its
// log shows no failed registration, the lost reply was not its
// registration's, and the check proves nothing.
func checkLostReply(o lostReplyObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameLostReply, verdictUnverified, "query failed: %v", o.err)
	case o.pid == 0:
		return newCheck(nameLostReply, verdictUnverified, "no worker was started with a lost reply: nothing to check")
	case !o.retried:
		return newCheck(nameLostReply, verdictUnverified, "pid %d logged no failed registration: the lost reply was not its registration's", o.pid)
	case !o.register:
		return newCheck(nameLostReply, verdictViolated, "pid %d never registered", o.pid)
	case o.row == nil:
		return newCheck(nameLostReply, verdictUnverified, "pid %d has no ferry_worker row", o.pid)
	}
	dead := o.row.diedRunning() && (o.until.IsZero() || o.row.deadAt.Before(o.until))
	result := fmt.Sprintf("pid %d's registration failed with its reply lost, then registered; declared dead %t, %d jobs started", o.pid, dead, o.started)
	switch {
	case dead || o.started == 0:
		return newCheck(nameLostReply, verdictViolated, "%s", result)
	case o.exit != nil:
		return newCheck(nameLostReply, verdictViolated, "%s; exited with code %d (last error: %q)", result, o.exit.code, o.exit.why)
	}
	return newCheck(nameLostReply, verdictOK, "%s, still up", result)
}
