package ferrycli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/limit"
)

// runEnqueue runs `enqueue args…` against url and returns its exit code,
// stdout and stderr.
func runEnqueue(t *testing.T, url string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := EnqueueApp()
	app.Writer, app.ErrWriter = &stdout, &stderr
	code := Run(context.Background(), app, append([]string{"enqueue", "--database-url", url}, args...))
	return code, stdout.String(), stderr.String()
}

// TestQueues_Fairness: a fair queue's jobs park behind a gate per key as
// they are inserted (no worker runs), and `enqueue queues` lists the
// queue's key field and its busiest keys with their weight and waiting
// jobs; other queues are listed as before.
func TestQueues_Fairness(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	l, err := limit.New(limit.Config{Pool: pool, Limits: []limit.Limit{{
		Name: limit.FairName("imports"), Queue: "imports", KeyField: "tenant",
		Fair: &limit.Fairness{Weights: map[string]float64{"acme": 3}, DefaultWeight: 0.5},
	}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))

	insert := func(queue, tenant string, n int) {
		t.Helper()
		_, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state)
			SELECT jsonb_build_object('tenant', $2::text), 'ferry.noop', 25, $1, 'available' FROM generate_series(1, $3)`,
			queue, tenant, n)
		require.NoError(t, err)
	}
	insert("imports", "acme", 5)
	for i := range 22 {
		insert("imports", fmt.Sprintf("t%02d", i), 1)
	}
	insert("default", "acme", 2)

	code, stdout, stderr := runEnqueue(t, url, "queues")
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^default\s+2\s+0\s+0\s+0\s+0\s+2\s+-\s+-$`, stdout, "a queue without fairness as before")
	require.Regexp(t, `(?m)^imports\s+0\s+0\s+0\s+27\s+0\s+27\s+-\s+-$`, stdout, "the fair queue's jobs parked (pending)")
	require.Regexp(t, `(?m)^FAIR QUEUE\s+KEY\s+WEIGHT\s+WAITING\s+RUNNING\s+STARTED$`, stdout)
	require.Regexp(t, `(?m)^imports\s+tenant\s+default 0\.5\s+27\s+0\s+0$`, stdout)
	require.Regexp(t, `(?m)^\s+= "acme"\s+3\s+5\s+0\s+0$`, stdout, "the busiest key first")
	require.Regexp(t, `(?m)^\s+= "t00"\s+0\.5\s+1\s+0\s+0$`, stdout)
	require.Regexp(t, `(?m)^\s+… and 3 more keys$`, stdout, "20 keys shown of 23")
	require.NotContains(t, stdout, `"t21"`)

	code, stdout, stderr = runEnqueue(t, url, "queues", "--json")
	require.Zero(t, code, stderr)
	var qs []struct {
		Queue    string           `json:"queue"`
		Counts   map[string]int64 `json:"counts"`
		Fairness *struct {
			Key           string             `json:"key"`
			Weights       map[string]float64 `json:"weights"`
			DefaultWeight float64            `json:"default_weight"`
			Waiting       int                `json:"waiting"`
			Keys          []fairKeyJSON      `json:"keys"`
		} `json:"fairness"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &qs), stdout)
	require.Len(t, qs, 2)
	require.Equal(t, "default", qs[0].Queue)
	require.Nil(t, qs[0].Fairness)
	require.NotContains(t, stdout[:bytes.Index([]byte(stdout), []byte(`"imports"`))], "fairness", "no fairness key on other queues")
	f := qs[1].Fairness
	require.NotNil(t, f)
	require.Equal(t, "tenant", f.Key)
	require.Equal(t, map[string]float64{"acme": 3}, f.Weights)
	require.Equal(t, 0.5, f.DefaultWeight)
	require.Equal(t, 27, f.Waiting)
	require.Len(t, f.Keys, 23, "--json lists every key")
	require.Equal(t, fairKeyJSON{Key: "acme", Weight: 3, fairUseJSON: fairUseJSON{Waiting: 5}}, f.Keys[0])
}

// A fair queue with no job, bound or River client yet is listed with
// zero counts, and its fairness with no key.
func TestQueues_FairQueueWithoutJobs(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	l, err := limit.New(limit.Config{Pool: pool, Limits: []limit.Limit{{
		Name: limit.FairName("imports"), Queue: "imports", KeyField: "tenant", Fair: &limit.Fairness{},
	}}})
	require.NoError(t, err)
	require.NoError(t, l.Register(ctx))

	code, stdout, stderr := runEnqueue(t, url, "queues")
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^imports\s+0\s+0\s+0\s+0\s+0\s+0\s+-\s+-$`, stdout)
	require.Regexp(t, `(?m)^imports\s+tenant\s+default 1\s+0\s+0\s+0$`, stdout)
}
