package workflow_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/workflow"
)

// lockedBuffer collects River's logs from several clients.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConcurrent_ShapesOnThreeClients runs workflows of mixed shapes (a
// 1,000-wide fan-out and fan-in, a chain of 60, diamonds, random layered
// DAGs) on three River clients at once, each with its own pool and
// completer: every step starts only after its dependencies completed
// (checked in the step, against committed state), every workflow
// completes, and no completer transaction failed (a deadlock between two
// clients' completions would be retried by River, and logged). (River's
// completer commits every 250 ms below 100 completions waiting: a chain
// pays that at each link here; a ferry worker completes steps at once,
// internal/workflowcap's eager completion, and the chaos suite runs
// chains of 200 on it.)
func TestConcurrent_ShapesOnThreeClients(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	h := newHarnessOn(t, url) // its client works too, beside three more
	var logs lockedBuffer
	for range 3 {
		h.startClient(pgtest.PoolFor(t, url), 50, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}

	var ids []string
	add := func(wf *workflow.Workflow) { ids = append(ids, h.insert(wf).ID) }

	fan := workflow.New("fan")
	fan.Add("root", stepArgs{Name: "fan/root"})
	var leaves []string
	for i := range 1000 {
		n := fmt.Sprint("leaf-", i)
		leaves = append(leaves, n)
		fan.Add(n, stepArgs{Name: "fan/" + n}, workflow.After("root"))
	}
	fan.Add("join", stepArgs{Name: "fan/join"}, workflow.After(leaves...))
	add(fan)

	chain := workflow.New("chain")
	chain.Add("0", stepArgs{Name: "chain/0"})
	for i := 1; i < 60; i++ {
		chain.Add(fmt.Sprint(i), stepArgs{Name: fmt.Sprint("chain/", i)}, workflow.After(fmt.Sprint(i-1)))
	}
	add(chain)

	for d := range 10 {
		p := fmt.Sprint("diamond-", d, "/")
		add(workflow.New("diamond").Add("a", stepArgs{Name: p + "a"}).
			Add("b", stepArgs{Name: p + "b"}, workflow.After("a")).Add("c", stepArgs{Name: p + "c"}, workflow.After("a")).
			Add("d", stepArgs{Name: p + "d"}, workflow.After("b", "c")))
	}

	rng := rand.New(rand.NewPCG(1, 2))
	for r := range 10 {
		wf := workflow.New("layers")
		var prev []string
		for layer := range 6 {
			var cur []string
			for i := range 1 + rng.IntN(20) {
				n := fmt.Sprintf("l%d-%d", layer, i)
				var deps []string
				for _, p := range prev {
					if rng.IntN(3) == 0 {
						deps = append(deps, p)
					}
				}
				wf.Add(n, stepArgs{Name: fmt.Sprintf("layers-%d/%s", r, n)}, workflow.After(deps...))
				cur = append(cur, n)
			}
			prev = cur
		}
		add(wf)
	}

	for _, id := range ids {
		in := h.wait(id, "completed")
		require.Equal(t, in.Progress.Steps, in.Progress.Completed, id)
	}
	h.noEarlyStarts()
	h.mu.Lock()
	counts := map[string]int{}
	for _, s := range h.started {
		counts[s]++
	}
	h.mu.Unlock()
	for s, n := range counts {
		require.Equal(t, 1, n, "step %s started %d times", s, n)
	}
	require.NotContains(t, logs.String(), "Completer error", "no completion failed: %s", logs.String())
	require.False(t, strings.Contains(logs.String(), "deadlock"), logs.String())
}
