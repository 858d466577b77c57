package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLeanLeavesCheckout runs the lean step and checks that it measured
// both services and left the checkout's go.mod and go.sum as they were: go
// list -m all on the checkout's own go.mod adds the sums of every module in
// the graph to go.sum, which go mod tidy (and the lint) would take out
// again, so a bench run left a checkout that the lint refused.
func TestLeanLeavesCheckout(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func() map[string][]byte {
		files := map[string][]byte{}
		for _, f := range []string{"go.mod", "go.sum"} {
			b, err := os.ReadFile(filepath.Join(root, f))
			require.NoError(t, err)
			files[f] = b
		}
		return files
	}
	before := read()
	r, err := leanConsumers(context.Background())
	require.NoError(t, err)
	require.Positive(t, r.Modules, "modules of the service importing jobs and outbox")
	require.Positive(t, r.RiverModules, "modules of the service importing River alone")
	require.Positive(t, r.BinaryMB)
	for f, b := range read() {
		require.True(t, bytes.Equal(before[f], b), "the lean step changed the checkout's %s: %d bytes, %d before", f, len(b), len(before[f]))
	}
}
