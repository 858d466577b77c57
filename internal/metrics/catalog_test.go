package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// silent describes a metric it never collects.
type silent struct{}

var silentDesc = prometheus.NewDesc("test_silent", `help with "quotes", {braces} and commas`, []string{"a", "b"}, prometheus.Labels{"c": `x"}`})

func (silent) Describe(ch chan<- *prometheus.Desc) { ch <- silentDesc }
func (silent) Collect(chan<- prometheus.Metric)    {}

type typedSilent struct{ silent }

func (typedSilent) Types() map[string]string { return map[string]string{"test_silent": "gauge"} }

func TestRegistry_Families(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	reg.MustRegister(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "test_total", Help: "a counter"}, []string{"queue"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "go_skipped", Help: "skipped"}),
		typedSilent{},
	)
	got, err := reg.Families("go_")
	require.NoError(t, err)
	require.Equal(t, []Family{
		{Name: "test_silent", Type: "gauge", Help: `help with "quotes", {braces} and commas`, Labels: []string{"a", "b", "c"}},
		{Name: "test_total", Type: "counter", Help: "a counter", Labels: []string{"queue"}},
	}, got, "a vector without children is listed; a silent collector's type is its Types'")

	reg = NewRegistry()
	reg.MustRegister(silent{})
	_, err = reg.Families()
	require.ErrorContains(t, err, "no type for test_silent")

	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_once", Help: "h"})
	reg.MustRegister(c)
	require.True(t, reg.Unregister(c))
	require.Len(t, reg.collectors, 1, "an unregistered collector is forgotten")
}
