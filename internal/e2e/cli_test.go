package e2e_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/pgtest"
)

// TestCLI_JSON: version answers --json; under --json a failure is a JSON
// object on stderr, with the exit code; leader with no holder exits 1.
func TestCLI_JSON(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)

	var v struct {
		Version string `json:"version"`
	}
	enqueueOK(t, url, &v, "version")
	require.NotEmpty(t, v.Version)

	stdout, stderr, code := enqueue(t, url, nil, "jobs", "get", "999999", "--json")
	require.Equal(t, 1, code, stderr)
	require.Empty(t, stdout)
	require.JSONEq(t, `{"error": "job 999999: not found", "exit_code": 1}`, oneLine(t, stderr))

	stdout, stderr, code = enqueue(t, url, nil, "jobs", "get", "x", "--json")
	require.Equal(t, 2, code, stderr)
	require.Empty(t, stdout)
	require.JSONEq(t, `{"error": "\"x\" is not a job id", "exit_code": 2}`, oneLine(t, stderr))

	stdout, stderr, code = enqueue(t, url, nil, "leader")
	require.Equal(t, 1, code, "no leader")
	require.Empty(t, stdout)
	require.Equal(t, "enqueue: no process holds the leader lock (key 911000001)", oneLine(t, stderr))

	stdout, stderr, code = enqueue(t, url, nil, "leader", "--json")
	require.Equal(t, 1, code, "no leader")
	require.JSONEq(t, `{"leader": null}`, stdout)
	require.JSONEq(t, `{"error": "no process holds the leader lock (key 911000001)", "exit_code": 1}`, oneLine(t, stderr))
}
