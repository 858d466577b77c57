package limit

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Limit is one entry of the config file's limits: section.
type Limit struct {
	// Name identifies the limit in ferry_limit, `enqueue limits` and the
	// metrics' limit label (default "kind:<kind>" or "queue:<queue>", with
	// "/<key>" when keyed).
	Name string
	// Kind or Queue (exactly one) selects the jobs the limit applies to.
	Kind  string
	Queue string
	// KeyField, when set, names a top-level field of the job's args: each
	// value of it gets a limit of its own (a job without the field shares
	// the limit of the empty key).
	KeyField string
	// Concurrency, when positive, is how many of the limit's jobs may run at
	// once across every worker.
	Concurrency int
	// Rate, when set, is how many of the limit's jobs may start per period
	// across every worker.
	Rate Rate
	// Fair, when set, makes the entry a queue's fairness (the config
	// file's fairness:), not a limit: Queue and KeyField, no Concurrency
	// nor Rate, named FairName(Queue). The queue's jobs park behind a gate
	// per key, and the workers serve the keys in proportion to their
	// weights.
	Fair *Fairness
}

// Fairness is a queue's weights: each value of the key field starts jobs
// in proportion to its weight while the queue is saturated.
type Fairness struct {
	// Weights are the weights of some keys' values; every other key has
	// DefaultWeight (1 when 0).
	Weights       map[string]float64
	DefaultWeight float64
}

// Weight is key's weight.
func (f *Fairness) Weight(key string) float64 {
	if w, ok := f.Weights[key]; ok {
		return w
	}
	return f.Default()
}

// Default is the weight of the keys Weights does not name.
func (f *Fairness) Default() float64 { return cmp.Or(f.DefaultWeight, 1) }

// FairName is the name of queue's fairness in ferry_limit (no limit's
// name may begin with "fair:").
func FairName(queue string) string { return "fair:" + queue }

// MaxWeight bounds a fairness's weights (and MinWeight from below: the
// ratio of two weights stays within what a start's share can show).
const (
	MinWeight = 0.001
	MaxWeight = 1_000_000
)

// WeightRange says what a weight may be, for errors.
const WeightRange = "is not between 0.001 and 1000000"

// counted reports whether the limit has a room to lock and read: a
// concurrency or a rate (a fairness has neither).
func (l *Limit) counted() bool { return l.Concurrency > 0 || !l.Rate.IsZero() }

// Rate is Count starts per Period, with Burst of them at once after a
// quiet spell (at least 1): in any window of length w, at most
// Burst + Count*w/Period jobs start.
type Rate struct {
	Count  int
	Period time.Duration
	Burst  int
}

// IsZero reports whether r sets no rate.
func (r Rate) IsZero() bool { return r.Count == 0 }

// Interval is the time between two starts at the sustained rate.
func (r Rate) Interval() time.Duration { return r.Period / time.Duration(r.Count) }

// tolerance is how far ahead of the sustained rate a start may come: the
// generic cell rate algorithm's τ, (Burst-1) intervals.
func (r Rate) tolerance() time.Duration { return time.Duration(r.Burst-1) * r.Interval() }

func (r Rate) String() string {
	if r.IsZero() {
		return ""
	}
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}[r.Period]
	return strconv.Itoa(r.Count) + "/" + unit
}

// MaxConcurrency bounds a limit's concurrency, MaxRateCount a rate's count
// and its burst.
const (
	MaxConcurrency = 100_000
	MaxRateCount   = 1_000_000
)

// ParseRate reads "N/s", "N/m" or "N/h".
func ParseRate(s string) (count int, period time.Duration, err error) {
	n, unit, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want N/s, N/m or N/h", s)
	}
	count, err = strconv.Atoi(strings.TrimSpace(n))
	if err != nil || count < 1 || count > MaxRateCount {
		return 0, 0, fmt.Errorf("%q: the count is not a whole number between 1 and %d", s, MaxRateCount)
	}
	switch strings.TrimSpace(unit) {
	case "s":
		period = time.Second
	case "m":
		period = time.Minute
	case "h":
		period = time.Hour
	default:
		return 0, 0, fmt.Errorf("%q: the unit %q is not s, m or h", s, unit)
	}
	return count, period, nil
}

var (
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)
	fieldRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// DefaultName is the name of a limit that gives none.
func DefaultName(l Limit) string {
	name := "kind:" + l.Kind
	if l.Queue != "" {
		name = "queue:" + l.Queue
	}
	if l.KeyField != "" {
		name += "/" + l.KeyField
	}
	return name
}

// Check reports the first problem of l as a field name and an error.
func (l Limit) Check() (field string, err error) {
	switch {
	case l.Kind == "" && l.Queue == "":
		return "kind, queue", errors.New("give one")
	case l.Kind != "" && l.Queue != "":
		return "kind, queue", errors.New("give one, not both")
	case !nameRE.MatchString(l.Name):
		return "name", fmt.Errorf("%q: use 1 to 128 letters, digits and _.:/-", l.Name)
	case l.KeyField != "" && !fieldRE.MatchString(l.KeyField):
		return "key", fmt.Errorf("%q is not a field name (a letter or _, then letters, digits or _)", l.KeyField)
	case l.Fair != nil:
		return l.checkFair()
	case strings.HasPrefix(l.Name, "fair:"):
		return "name", fmt.Errorf("%q: fair: names a queue's fairness", l.Name)
	case l.Concurrency == 0 && l.Rate.IsZero():
		return "concurrency, rate", errors.New("give one or both")
	case l.Concurrency < 0 || l.Concurrency > MaxConcurrency:
		return "concurrency", fmt.Errorf("%d is not between 1 and %d", l.Concurrency, MaxConcurrency)
	case !l.Rate.IsZero() && (l.Rate.Burst < 1 || l.Rate.Burst > MaxRateCount):
		return "burst", fmt.Errorf("%d is not between 1 and %d", l.Rate.Burst, MaxRateCount)
	case l.Rate.IsZero() && l.Rate.Burst != 0:
		return "burst", errors.New("a burst needs a rate")
	}
	return "", nil
}

// checkFair is Check of a fairness.
func (l Limit) checkFair() (field string, err error) {
	switch {
	case l.Queue == "":
		return "queue", errors.New("give the queue")
	case l.KeyField == "":
		return "key", errors.New("give the field of the jobs' args whose values share the queue")
	case l.Name != FairName(l.Queue):
		return "name", fmt.Errorf("%q: a fairness is named %q", l.Name, FairName(l.Queue))
	case l.Concurrency != 0 || !l.Rate.IsZero():
		return "concurrency, rate", errors.New("a fairness has neither: give them in limits:")
	case l.Fair.DefaultWeight != 0 && !weightOK(l.Fair.DefaultWeight):
		return "default_weight", fmt.Errorf("%v %s", l.Fair.DefaultWeight, WeightRange)
	}
	for _, k := range slices.Sorted(maps.Keys(l.Fair.Weights)) {
		if w := l.Fair.Weights[k]; !weightOK(w) {
			return "weights", fmt.Errorf("%q: %v %s", k, w, WeightRange)
		}
	}
	return "", nil
}

func weightOK(w float64) bool { return w >= MinWeight && w <= MaxWeight }
