package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

func TestLockObserver(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	o, err := NewLockObserver(reg)
	require.NoError(t, err)

	o.Acquired("report")
	require.InDelta(t, 1, testutil.ToFloat64(o.held.WithLabelValues("report")), 0)
	o.Released("report")
	o.Acquired("report")
	o.Lost("report")
	o.Acquired("deploy")

	require.InDelta(t, 0, testutil.ToFloat64(o.held.WithLabelValues("report")), 0)
	require.InDelta(t, 2, testutil.ToFloat64(o.acquired.WithLabelValues("report")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(o.lost.WithLabelValues("report")), 0)
	require.InDelta(t, 1, testutil.ToFloat64(o.held.WithLabelValues("deploy")), 0)
	require.InDelta(t, 0, testutil.ToFloat64(o.lost.WithLabelValues("deploy")), 0)

	_, err = NewLockObserver(reg)
	require.Error(t, err, "registered once per registry")
}
