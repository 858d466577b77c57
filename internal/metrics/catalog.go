package metrics

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Registry is a process's Prometheus registry that remembers the
// collectors registered with it, so that Families can list every metric
// with its labels before the metric has a value (a vector without
// children gathers nothing). The metrics reference, docs/metrics.md, is
// generated from it.
type Registry struct {
	*prometheus.Registry

	mu         sync.Mutex
	collectors []prometheus.Collector
}

// NewRegistry returns an empty Registry.
func NewRegistry() *Registry { return &Registry{Registry: prometheus.NewRegistry()} }

// Register registers c, and remembers it when the registry took it.
func (r *Registry) Register(c prometheus.Collector) error {
	if err := r.Registry.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = append(r.collectors, c)
	return nil
}

// MustRegister registers each of cs, panicking on the first refused.
func (r *Registry) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister unregisters c and forgets it.
func (r *Registry) Unregister(c prometheus.Collector) bool {
	if !r.Registry.Unregister(c) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectors = slices.DeleteFunc(r.collectors, func(x prometheus.Collector) bool { return x == c })
	return true
}

// Family is one metric as a collector describes it.
type Family struct {
	Name string
	// Type is counter, gauge, histogram, summary or untyped.
	Type string
	Help string
	// Labels are the label names: the variable ones, then the constant
	// ones.
	Labels []string
}

// Families describes every metric of the registered collectors, by name,
// but for those whose name starts with one of skip (the Go and process
// collectors' go_ and process_). A metric's type is its collector's (a
// counter, a vector of histograms …) or, for a collector of its own, that
// of the values it collects now; a metric of which it collects none has
// the type the collector declares through its Types method
// (map[name]type) when it has one, else an error names it.
func (r *Registry) Families(skip ...string) ([]Family, error) {
	r.mu.Lock()
	cs := slices.Clone(r.collectors)
	r.mu.Unlock()
	byName := map[string]Family{}
	var untyped []string
	for _, c := range cs {
		types := collectedTypes(c)
		if t, ok := c.(interface{ Types() map[string]string }); ok {
			for name, typ := range t.Types() {
				types[name] = cmp.Or(types[name], typ)
			}
		}
		for _, d := range describe(c) {
			f, err := parseDesc(d.String())
			if err != nil {
				return nil, err
			}
			if slices.ContainsFunc(skip, func(p string) bool { return strings.HasPrefix(f.Name, p) }) {
				continue
			}
			f.Type = cmp.Or(vectorType(c), types[f.Name])
			if f.Type == "" {
				untyped = append(untyped, f.Name)
			}
			byName[f.Name] = f
		}
	}
	if len(untyped) > 0 {
		slices.Sort(untyped)
		return nil, fmt.Errorf("metrics: no type for %s: its collector collected no value of it and has no Types method", strings.Join(untyped, ", "))
	}
	out := make([]Family, 0, len(byName))
	for _, f := range byName {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

// collectedTypes are the types, by metric name, of what c collects now,
// as a registry of its own gathers them.
func collectedTypes(c prometheus.Collector) map[string]string {
	out := map[string]string{}
	reg := prometheus.NewRegistry()
	if reg.Register(c) != nil {
		return out
	}
	families, _ := reg.Gather()
	for _, f := range families {
		out[f.GetName()] = strings.ToLower(f.GetType().String())
	}
	return out
}

// vectorType is the type of a vector collector's metrics, "" for any other
// collector.
func vectorType(c prometheus.Collector) string {
	switch c.(type) {
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.SummaryVec:
		return "summary"
	}
	return ""
}

// parseDesc reads the name, help and label names of a Desc from its
// String, the only place the client library shows them:
// Desc{fqName: "…", help: "…", unit: "…", constLabels: {a="…"},
// variableLabels: {b,c(d)}}.
func parseDesc(s string) (Family, error) {
	var f Family
	rest, ok := strings.CutPrefix(s, "Desc{fqName: ")
	bad := func() (Family, error) { return Family{}, fmt.Errorf("metrics: cannot read %s", s) }
	quoted := func(prefix string) (string, bool) {
		var ok bool
		if rest, ok = strings.CutPrefix(rest, prefix); !ok {
			return "", false
		}
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return "", false
		}
		rest = rest[len(q):]
		v, err := strconv.Unquote(q)
		return v, err == nil
	}
	if !ok {
		return bad()
	}
	if f.Name, ok = quoted(""); !ok {
		return bad()
	}
	if f.Help, ok = quoted(", help: "); !ok {
		return bad()
	}
	if _, ok = quoted(", unit: "); !ok {
		return bad()
	}
	if rest, ok = strings.CutPrefix(rest, ", constLabels: {"); !ok {
		return bad()
	}
	var constant []string
	for !strings.HasPrefix(rest, "}") {
		rest = strings.TrimPrefix(rest, ",")
		name, after, found := strings.Cut(rest, "=")
		if !found {
			return bad()
		}
		constant, rest = append(constant, name), after
		if _, ok = quoted(""); !ok {
			return bad()
		}
	}
	vars, ok := strings.CutPrefix(rest, "}, variableLabels: {")
	if !ok || !strings.HasSuffix(vars, "}}") {
		return bad()
	}
	for _, v := range strings.Split(strings.TrimSuffix(vars, "}}"), ",") {
		if v = strings.TrimSuffix(strings.TrimPrefix(v, "c("), ")"); v != "" {
			f.Labels = append(f.Labels, v)
		}
	}
	f.Labels = append(f.Labels, constant...)
	return f, nil
}
