package outbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryq/ferry/internal/base/redact"
)

// Message is one row of ferry_outbox as a receiver sees it.
type Message struct {
	ID        int64           `json:"id"`
	Topic     string          `json:"topic"`
	Payload   json.RawMessage `json:"payload"`
	DedupKey  *string         `json:"dedup_key,omitempty"`
	CreatedAt time.Time       `json:"created_at"`
	// OrderingKey is the message's ordering key (WithOrderingKey); "" for
	// none.
	OrderingKey string `json:"ordering_key,omitempty"`
}

// EventID is the id receivers dedup on: the message id, as sent in the
// Ferry-Event-Id header.
func (m Message) EventID() string { return fmt.Sprint(m.ID) }

// Handler is a Go receiver. It runs inside tx, the transaction that also
// records the message as received (Receive) and completes the delivery's
// River job, so its database effect happens once whatever the retries. It
// must not commit or roll back tx.
type Handler func(ctx context.Context, tx pgx.Tx, msg Message) error

// Route sends one topic's messages to one receiver: an HTTP webhook (URL) or
// a Go handler (Handler). Each (message, route) is one delivery.
type Route struct {
	// Topic is the topic routed.
	Topic string
	// Name identifies the route in ferry_outbox_delivery and, for a Go
	// handler, is the consumer name in ferry_outbox_received. Unique across
	// all routes; keep it stable.
	Name string

	// URL of the webhook (http or https).
	URL string
	// Secrets are the keys that sign each request (webhook-signature and
	// Ferry-Signature, HMAC-SHA256): one, or several while a secret is
	// rotated, each signing. The config file names the environment
	// variable that holds them (secret_env), never the secrets themselves;
	// ParseSecrets reads its "whsec_…" or raw form. None: the requests are
	// not signed.
	Secrets [][]byte
	// Headers are sent with every request.
	Headers map[string]string
	// Timeout of one request; default 10s.
	Timeout time.Duration
	// Workers is how many workers work the route's queue in each process
	// that delivers it: at most that many of its deliveries run at once per
	// process. 0 leaves it to the process: ferry.Server gives a webhook the
	// outbox queue's worker count (FERRY_QUEUES) and a Go handler, whose
	// running deliveries each hold a database connection, at most
	// ferry.DefaultHandlerRouteWorkers of it.
	Workers int

	// Handler is a Go receiver, instead of a URL.
	Handler Handler
}

// DefaultRouteTimeout is a webhook's request timeout unless set.
const DefaultRouteTimeout = 10 * time.Second

// MaxRouteWorkers bounds Route.Workers, as ferry.MaxWorkersPerQueue bounds
// any queue's workers in one process.
const MaxRouteWorkers = 10_000

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func (r Route) validate() error {
	if !nameRE.MatchString(r.Topic) {
		return fmt.Errorf("topic %q: 1 to 128 letters, digits or _.:-", r.Topic)
	}
	if !nameRE.MatchString(r.Name) {
		return fmt.Errorf("name %q: 1 to 128 letters, digits or _.:-", r.Name)
	}
	switch {
	case r.URL != "" && r.Handler != nil:
		return errors.New("url, handler: a route has one receiver, not both")
	case r.URL == "" && r.Handler == nil:
		return errors.New("url: missing (or a Go handler)")
	case r.URL != "":
		u, err := url.Parse(r.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("url %q: not an absolute http(s) URL", redact.URL(r.URL))
		}
		if u.User != nil {
			return errors.New("url: credentials in the URL would be logged; use headers from the environment")
		}
	}
	if r.Timeout < 0 || r.Timeout > 10*time.Minute {
		return fmt.Errorf("timeout %s: between 0 and 10m", r.Timeout)
	}
	if r.Workers < 0 || r.Workers > MaxRouteWorkers {
		return fmt.Errorf("workers %d: between 1 and %d (0 or none: the process's default)", r.Workers, MaxRouteWorkers)
	}
	return nil
}

// Routes is the routing table of one process.
type Routes struct {
	routes  []Route
	byTopic map[string][]Route
	byName  map[string]Route
}

// RouteError is an invalid route given to NewRoutes: "route 2 (name
// "billing"): url: missing (or a Go handler)".
type RouteError struct {
	Index int    // the route's position among NewRoutes' arguments
	Name  string // its name, as given
	Err   error  // what is wrong, naming the field: "url: missing (or a Go handler)"
}

func (e *RouteError) Error() string {
	return fmt.Sprintf("route %d (name %q): %v", e.Index, e.Name, e.Err)
}

func (e *RouteError) Unwrap() error { return e.Err }

// NewRoutes checks routes (each valid, names unique) and indexes them. An
// invalid route is a *RouteError.
func NewRoutes(routes ...Route) (*Routes, error) {
	rs := &Routes{byTopic: map[string][]Route{}, byName: map[string]Route{}}
	for i, r := range routes {
		if r.Timeout == 0 {
			r.Timeout = DefaultRouteTimeout
		}
		if err := r.validate(); err != nil {
			return nil, &RouteError{Index: i, Name: r.Name, Err: err}
		}
		if _, dup := rs.byName[r.Name]; dup {
			return nil, &RouteError{Index: i, Name: r.Name, Err: errors.New("name: already used")}
		}
		rs.routes = append(rs.routes, r)
		rs.byName[r.Name] = r
		rs.byTopic[r.Topic] = append(rs.byTopic[r.Topic], r)
	}
	return rs, nil
}

// For returns the routes of topic.
func (rs *Routes) For(topic string) []Route { return rs.byTopic[topic] }

// Get returns the route named name.
func (rs *Routes) Get(name string) (Route, bool) {
	r, ok := rs.byName[name]
	return r, ok
}

// All returns every route.
func (rs *Routes) All() []Route { return slices.Clone(rs.routes) }

// Queues returns the River queues of every route (QueueFor), sorted: the
// queues a process that delivers these routes works.
func (rs *Routes) Queues() []string {
	qs := make([]string, 0, len(rs.routes))
	for _, r := range rs.routes {
		qs = append(qs, QueueFor(r.Name))
	}
	slices.Sort(qs)
	return qs
}

// RouteQueuePrefix begins the name of every route's River queue.
const RouteQueuePrefix = "outbox_"

// QueueFor is the River queue of the deliveries to the route named name:
// "outbox_", a readable form of the name (lowercase letters and digits,
// anything else a single "-", at most 36 characters), "_", and 20 hex
// digits of the name's SHA-256. River allows 64 lowercase letters and
// digits separated by single _ or -; route names allow 128 characters of
// either case and _.:-, so a readable form alone could not be unique. The
// same name gives the same queue on every worker and every version; two
// names meet on a queue only if their hashes' first 80 bits do.
func QueueFor(name string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(name) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(c)
		} else {
			dash = true
		}
		if b.Len() >= 35 {
			break
		}
	}
	slug := strings.TrimSuffix(b.String(), "-")
	sum := sha256.Sum256([]byte(name))
	if slug == "" {
		return RouteQueuePrefix + hex.EncodeToString(sum[:10])
	}
	return RouteQueuePrefix + slug + "_" + hex.EncodeToString(sum[:10])
}

// kind is what ferry_outbox_route.kind says of the route.
func (r Route) kind() string {
	if r.Handler != nil {
		return "handler"
	}
	return "webhook"
}
