package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/locks"
)

// LockObserver counts the named locks (package locks) this process
// acquires, holds and loses, by name. It is the locks.Observer of the
// Server's lock client.
type LockObserver struct {
	held     *prometheus.GaugeVec
	acquired *prometheus.CounterVec
	lost     *prometheus.CounterVec
}

var _ locks.Observer = (*LockObserver)(nil)

// NewLockObserver registers ferry_locks_held, ferry_lock_acquisitions_total
// and ferry_lock_losses_total (each by name) in reg.
func NewLockObserver(reg prometheus.Registerer) (*LockObserver, error) {
	o := &LockObserver{
		held: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ferry_locks_held",
			Help: "Named locks this process holds now, by name (1 or 0).",
		}, []string{"name"}),
		acquired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_lock_acquisitions_total",
			Help: "Named locks this process acquired, by name.",
		}, []string{"name"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_lock_losses_total",
			Help: "Named locks this process lost while holding them (renewals failed or the lock was taken after its expiry), by name.",
		}, []string{"name"}),
	}
	for _, c := range []prometheus.Collector{o.held, o.acquired, o.lost} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Acquired counts an acquisition of name and marks it held.
func (o *LockObserver) Acquired(name string) {
	o.acquired.WithLabelValues(name).Inc()
	o.held.WithLabelValues(name).Inc()
}

// Released marks name no longer held.
func (o *LockObserver) Released(name string) { o.held.WithLabelValues(name).Dec() }

// Lost counts a loss of name and marks it no longer held.
func (o *LockObserver) Lost(name string) {
	o.lost.WithLabelValues(name).Inc()
	o.held.WithLabelValues(name).Dec()
}
