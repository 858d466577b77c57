package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSuite_ReplacesAWorkerDeclaredDead: a worker that stops itself,
// declared dead after the harness ended its sessions, is replaced, and its
// exit is recorded as one to expect.
func TestSuite_ReplacesAWorkerDeclaredDead(t *testing.T) {
	t.Parallel()

	// The first run waits for "go", says it was declared dead and exits 1,
	// as a chaos worker does; the next one stays up.
	dir := t.TempDir()
	bin := filepath.Join(dir, "worker")
	script := fmt.Sprintf(`#!/bin/sh
if [ ! -e %[1]q ]; then
	: > %[1]q
	while [ ! -e %[2]q ]; do sleep 0.01; done
	echo '{"time":"2027-01-01T12:00:00Z","level":"ERROR","msg":"liveness: declared dead; stopping"}' >&2
	exit 1
fi
exec sleep 30
`, filepath.Join(dir, "ran"), filepath.Join(dir, "go"))
	require.NoError(t, os.WriteFile(bin, []byte(script), 0o755))

	s := newSuite()
	s.bin, s.url, s.jobURL = bin, "postgres://chaos@127.0.0.1:1/chaos", "postgres://chaos@127.0.0.1:1/chaos"
	t.Cleanup(func() { _ = s.workers.Kill(10 * time.Second) })
	first, err := s.start()
	require.NoError(t, err)
	s.expose(exposedSessions, first)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o600))
	<-first.Done()
	require.Eventually(t, func() bool { return len(s.workers.Live()) == 1 }, 10*time.Second, 10*time.Millisecond, "a worker started in its place")
	require.Empty(t, s.working()[0].Stderr())

	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.expose(exposedKill, s.workers.Live()...)
	require.NoError(t, s.workers.Kill(10*time.Second))
	s.watching.Wait()
	require.Len(t, s.workers.Procs(), 2, "the killed one is not replaced")
	requireVerdict(t, checkExits(exitObs{exits: s.exits, exposures: s.exposuresCopy()}), verdictOK,
		"2 exits: 1 killed, 0 stopped with SIGTERM (code 0), 1 stopped themselves declared dead after their sessions ended (restarted), 0 unexpected")
}
