// Package config reads the worker's YAML file (FERRY_CONFIG): schedules,
// queues (worker counts and bounds), outbox routes, Telegram bots and
// limits (concurrency and rate). Unknown keys, unknown job kinds, bad
// expressions or zones and duplicate ids are refused with one line naming
// the entry and the field: a *FieldError, or an *UnknownKeyError for a
// key no setting has. Secrets are never written in the file, only the
// names of the environment variables that hold them.
package config

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"go.yaml.in/yaml/v3"

	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// File is the YAML document.
type File struct {
	Schedules []ScheduleEntry `yaml:"schedules" doc:"schedules the leader ticks, each tick a River job"`
	Queues    []QueueEntry    `yaml:"queues" doc:"queues' worker counts in this process and their bounds"`
	Outbox    OutboxSection   `yaml:"outbox" doc:"the outbox's deliveries and webhook routes"`
	Telegram  TelegramSection `yaml:"telegram" doc:"Telegram bots whose updates the leader long-polls"`
	Limits    []LimitEntry    `yaml:"limits" doc:"concurrency and rate limits on the jobs of a kind or a queue, across every worker"`
	Fairness  []FairnessEntry `yaml:"fairness" doc:"queues whose keys share them by weight, across every worker"`
}

// FairnessEntry is one `fairness:` item: a queue whose jobs start, while
// it is saturated, in proportion to the weights of their keys' values
// (package internal/limit).
type FairnessEntry struct {
	Queue         string             `yaml:"queue" doc:"the queue shared"`
	Key           string             `yaml:"key" doc:"a top-level field of the jobs' args: each value of it gets its share"`
	Weights       map[string]float64 `yaml:"weights" type:"map of value to number" default:"{}" doc:"the weights of some values of the key, between 0.001 and 1000000"`
	DefaultWeight *float64           `yaml:"default_weight" type:"number" default:"1" doc:"the weight of every other value"`
}

// LimitEntry is one `limits:` item: a concurrency limit, a rate limit or
// both on the jobs of a kind or a queue, across every worker, optionally
// per value of a top-level field of the jobs' args (package
// internal/limit).
type LimitEntry struct {
	Name        string `yaml:"name" default:"kind:KIND or queue:QUEUE, then /KEY" doc:"the limit's name, as enqueue limits and the metrics show it"`
	Kind        string `yaml:"kind" doc:"the job kind limited (give kind or queue)"`
	Queue       string `yaml:"queue" doc:"the queue limited (give kind or queue)"`
	Key         string `yaml:"key" doc:"a top-level field of the jobs' args: the limit holds per value of it"`
	Concurrency int    `yaml:"concurrency" doc:"the most such jobs running at once (give concurrency, rate or both)"`
	Rate        string `yaml:"rate" doc:"the most such jobs started per period: N/s, N/m or N/h"`
	Burst       int    `yaml:"burst" default:"1" doc:"starts a rate lets through at once after a quiet period"`
}

// TelegramSection is the `telegram:` section.
type TelegramSection struct {
	Bots []BotEntry `yaml:"bots" doc:"the bots"`
}

// BotEntry is one `telegram.bots` item.
type BotEntry struct {
	Name           string   `yaml:"name" doc:"the bot's name, unique; its updates are outbox messages of topic telegram.NAME"`
	TokenEnv       string   `yaml:"token_env" doc:"the environment variable that holds the bot's token (unset: the bot stays off)"`
	AllowedUpdates []string `yaml:"allowed_updates" default:"Telegram's" doc:"the update types to receive (Telegram's allowed_updates)"`
	Timeout        string   `yaml:"timeout" type:"duration" default:"25s" doc:"the long poll's timeout, between 1s and 50s"`
}

// Bot is a configured bot, as the Telegram capability takes it. Token is
// empty when its variable is unset: the bot stays off, and the worker says
// so in one line.
type Bot = telegram.Bot

// OutboxSection is the `outbox:` section.
type OutboxSection struct {
	MaxAttempts int          `yaml:"max_attempts" default:"24" doc:"attempts of each delivery before it is stuck, between 1 and 1000"`
	Routes      []RouteEntry `yaml:"routes" doc:"webhooks, each delivering a topic's messages"`
}

// RouteEntry is one `outbox.routes` item: a webhook for a topic.
type RouteEntry struct {
	Topic     string            `yaml:"topic" doc:"the topic whose messages the route delivers"`
	Name      string            `yaml:"name" doc:"the route's name, unique: its deliveries' route"`
	URL       string            `yaml:"url" doc:"the URL each message is POSTed to"`
	SecretEnv string            `yaml:"secret_env" doc:"the environment variable that holds the signing secrets (whsec_… or raw, space-separated)"`
	Timeout   string            `yaml:"timeout" type:"duration" default:"10s" doc:"each request's timeout"`
	Headers   map[string]string `yaml:"headers" doc:"headers added to each request"`
	// Workers, when set, is how many workers deliver the route in each
	// process (outbox.Route.Workers), over the outbox count of FERRY_QUEUES.
	Workers int `yaml:"workers" default:"the outbox queue's workers" doc:"workers delivering the route in each process"`
}

// QueueEntry is one `queues:` item: a queue's worker count in this
// process and its bound.
type QueueEntry struct {
	Name string `yaml:"name" doc:"the queue"`
	// Workers, when set, is the queue's worker count in this process, over
	// FERRY_QUEUES'; a queue with workers is worked by this process.
	Workers int `yaml:"workers" default:"FERRY_QUEUES'" doc:"the queue's worker count in this process, over FERRY_QUEUES'"`
	// MaxLength, when set, is the queue's bound, over
	// FERRY_QUEUE_MAX_LENGTH; 0 is unbounded.
	MaxLength *int64 `yaml:"max_length" default:"FERRY_QUEUE_MAX_LENGTH" doc:"the queue's bound, over FERRY_QUEUE_MAX_LENGTH; 0 is unbounded"`
}

// Queue is a configured queue: Workers 0 leaves the worker count (and
// whether this process works the queue) to FERRY_QUEUES, a nil MaxLength
// leaves the bound to FERRY_QUEUE_MAX_LENGTH.
type Queue struct {
	Name      string
	Workers   int
	MaxLength *int64
}

// Loaded is what a file configures.
type Loaded struct {
	Schedules         []periodic.Schedule
	Queues            []Queue
	Routes            []outbox.Route
	OutboxMaxAttempts int // 0 when the file does not set it
	Bots              []Bot
	Limits            []limit.Limit
}

// ScheduleEntry is one `schedules:` item (keys as in DESIGN.md, "Config
// file").
type ScheduleEntry struct {
	ID      string         `yaml:"id" doc:"the schedule's stable id, the key of its ticks"`
	Name    string         `yaml:"name" default:"the id" doc:"what monitors match; keep it stable"`
	Every   string         `yaml:"every" type:"duration" doc:"an interval aligned to the Unix epoch in UTC, such as 15m (give every or cron)"`
	Cron    string         `yaml:"cron" doc:"a 5-field cron expression or @hourly … @yearly (give every or cron)"`
	Zone    string         `yaml:"zone" default:"UTC" doc:"the IANA zone of cron"`
	Kind    string         `yaml:"kind" doc:"the job kind each tick enqueues, a kind this worker runs"`
	Args    map[string]any `yaml:"args" default:"{}" doc:"the job's args"`
	Queue   string         `yaml:"queue" default:"the kind's" doc:"the job's queue"`
	CatchUp string         `yaml:"catch_up" default:"last" doc:"after downtime: last enqueues the latest missed tick if within misfire, none records every missed tick as skipped"`
	Misfire string         `yaml:"misfire" type:"duration" default:"one interval" doc:"how old the latest missed tick may be for catch_up last to still enqueue it"`
	Overlap string         `yaml:"overlap" default:"skip" doc:"while the previous tick's job is unfinished: skip records the tick as skipped, allow enqueues it anyway"`
}

// FieldError is a problem with one field of one entry of the file:
// `schedules[2] (id "nightly"): cron: ...`. Every check of an entry
// returns one; errors.As finds it through Load's "config PATH: " prefix.
type FieldError struct {
	// Entry is the entry, as the file counts them: `schedules[2] (id
	// "nightly")`, `outbox.routes[0] (name "billing")`, `telegram.bots[1]
	// (name "desk")`, or the section `outbox`.
	Entry string
	// Field is the key at fault ("cron", "kind", "every, cron" when the two
	// conflict), or "" when Err names it: the scheduler's and the outbox's
	// own checks (`catch_up "all": want last or none`).
	Field string
	Err   error
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Entry + ": " + e.Err.Error()
	}
	return e.Entry + ": " + e.Field + ": " + e.Err.Error()
}

func (e *FieldError) Unwrap() error { return e.Err }

func fieldErrorf(entry, field, format string, args ...any) *FieldError {
	return &FieldError{Entry: entry, Field: field, Err: fmt.Errorf(format, args...)}
}

func scheduleEntry(i int, id string) string { return fmt.Sprintf("schedules[%d] (id %q)", i, id) }

func routeEntry(i int, name string) string {
	return fmt.Sprintf("outbox.routes[%d] (name %q)", i, name)
}

// UnknownKeyError is a key in the file that no setting has: a typo, or a
// secret written in the file (token:) rather than named (token_env:).
type UnknownKeyError struct {
	Line int    // 1-based line of the key
	Key  string // the key as written
}

func (e *UnknownKeyError) Error() string {
	return fmt.Sprintf("line %d: unknown key %s", e.Line, e.Key)
}

// Kinds tells the loader which job kinds this process works, and their
// queues.
type Kinds interface {
	Get(name string) (jobs.Kind, bool)
}

// Load reads path and returns what it configures, checked against kinds
// (and the environment, for route secrets). An empty path means no file.
func Load(path string, kinds Kinds) (Loaded, error) {
	if path == "" {
		return Loaded{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return Loaded{}, fmt.Errorf("config %s: %w", path, unwrapPathError(err))
	}
	loaded, err := Parse(b, kinds)
	if err != nil {
		return Loaded{}, fmt.Errorf("config %s: %w", path, err)
	}
	return loaded, nil
}

// Parse reads a YAML document (see Load).
func Parse(b []byte, kinds Kinds) (Loaded, error) {
	f, err := decode(b)
	if err != nil {
		return Loaded{}, err
	}
	bots, err := f.Telegram.bots()
	if err != nil {
		return Loaded{}, err
	}
	schedules, err := f.schedules(kinds)
	if err != nil {
		return Loaded{}, err
	}
	queues, err := f.queues()
	if err != nil {
		return Loaded{}, err
	}
	routes, err := f.Outbox.routes()
	if err != nil {
		return Loaded{}, err
	}
	if f.Outbox.MaxAttempts < 0 || f.Outbox.MaxAttempts > 1000 {
		return Loaded{}, fieldErrorf("outbox", "max_attempts", "%d is not between 1 and 1000", f.Outbox.MaxAttempts)
	}
	limits, err := f.limits(kinds)
	if err != nil {
		return Loaded{}, err
	}
	fair, err := f.fairness()
	if err != nil {
		return Loaded{}, err
	}
	limits = append(limits, fair...)
	return Loaded{Schedules: schedules, Queues: queues, Routes: routes, OutboxMaxAttempts: f.Outbox.MaxAttempts, Bots: bots, Limits: limits}, nil
}

func (f File) limits(kinds Kinds) ([]limit.Limit, error) {
	out := make([]limit.Limit, 0, len(f.Limits))
	seen := map[string]int{}
	for i, e := range f.Limits {
		l := limit.Limit{Name: e.Name, Kind: e.Kind, Queue: e.Queue, KeyField: e.Key, Concurrency: e.Concurrency}
		if l.Name == "" && (l.Kind != "" || l.Queue != "") {
			l.Name = limit.DefaultName(l)
		}
		where := fmt.Sprintf("limits[%d]", i)
		if l.Name != "" {
			where += fmt.Sprintf(" (name %q)", l.Name)
		}
		if e.Queue != "" {
			if err := jobs.ValidateQueueName(e.Queue); err != nil {
				return nil, &FieldError{Entry: where, Field: "queue", Err: err}
			}
		}
		if e.Rate != "" {
			count, period, err := limit.ParseRate(e.Rate)
			if err != nil {
				return nil, &FieldError{Entry: where, Field: "rate", Err: err}
			}
			l.Rate = limit.Rate{Count: count, Period: period, Burst: cmp.Or(e.Burst, 1)}
		} else if e.Burst != 0 {
			return nil, fieldErrorf(where, "burst", "a burst needs a rate")
		}
		if field, err := l.Check(); err != nil {
			return nil, &FieldError{Entry: where, Field: field, Err: err}
		}
		if e.Kind != "" {
			if _, ok := kinds.Get(e.Kind); !ok {
				return nil, fieldErrorf(where, "kind", "%q is not a job kind this worker runs", e.Kind)
			}
		}
		if j, dup := seen[l.Name]; dup {
			return nil, fieldErrorf(where, "name", "already used by limits[%d]", j)
		}
		seen[l.Name] = i
		out = append(out, l)
	}
	return out, nil
}

// fairness reads the `fairness:` entries as limit.Limits with Fair set.
func (f File) fairness() ([]limit.Limit, error) {
	out := make([]limit.Limit, 0, len(f.Fairness))
	seen := map[string]int{}
	for i, e := range f.Fairness {
		where := fmt.Sprintf("fairness[%d] (queue %q)", i, e.Queue)
		if err := jobs.ValidateQueueName(e.Queue); err != nil {
			return nil, &FieldError{Entry: where, Field: "queue", Err: err}
		}
		if j, dup := seen[e.Queue]; dup {
			return nil, fieldErrorf(where, "queue", "already shared by fairness[%d]", j)
		}
		seen[e.Queue] = i
		l := limit.Limit{Name: limit.FairName(e.Queue), Queue: e.Queue, KeyField: e.Key,
			Fair: &limit.Fairness{Weights: e.Weights, DefaultWeight: 1}}
		if w := e.DefaultWeight; w != nil {
			if *w < limit.MinWeight || *w > limit.MaxWeight {
				return nil, fieldErrorf(where, "default_weight", "%v %s", *w, limit.WeightRange)
			}
			l.Fair.DefaultWeight = *w
		}
		if field, err := l.Check(); err != nil {
			return nil, &FieldError{Entry: where, Field: field, Err: err}
		}
		out = append(out, l)
	}
	return out, nil
}

// MaxQueueWorkers is the most workers a `queues:` entry may give a queue
// (the root package's MaxWorkersPerQueue).
const MaxQueueWorkers = 10_000

func (f File) queues() ([]Queue, error) {
	out := make([]Queue, 0, len(f.Queues))
	seen := map[string]int{}
	for i, e := range f.Queues {
		where := fmt.Sprintf("queues[%d] (name %q)", i, e.Name)
		if err := jobs.ValidateQueueName(e.Name); err != nil {
			return nil, &FieldError{Entry: where, Field: "name", Err: err}
		}
		if j, dup := seen[e.Name]; dup {
			return nil, fieldErrorf(where, "name", "already used by queues[%d]", j)
		}
		seen[e.Name] = i
		if e.Workers < 0 || e.Workers > MaxQueueWorkers {
			return nil, fieldErrorf(where, "workers", "%d is not between 1 and %d", e.Workers, MaxQueueWorkers)
		}
		if e.MaxLength != nil && *e.MaxLength < 0 {
			return nil, fieldErrorf(where, "max_length", "%d is negative (0 is unbounded)", *e.MaxLength)
		}
		if e.Workers == 0 && e.MaxLength == nil {
			return nil, fieldErrorf(where, "workers, max_length", "give one or both")
		}
		out = append(out, Queue(e))
	}
	return out, nil
}

func (t TelegramSection) bots() ([]Bot, error) {
	out := make([]Bot, 0, len(t.Bots))
	seen := map[string]int{}
	for i, e := range t.Bots {
		where := fmt.Sprintf("telegram.bots[%d] (name %q)", i, e.Name)
		if err := telegram.ValidateBotName(e.Name); err != nil {
			return nil, &FieldError{Entry: where, Field: "name", Err: err}
		}
		if j, dup := seen[e.Name]; dup {
			return nil, fieldErrorf(where, "name", "already used by telegram.bots[%d]", j)
		}
		seen[e.Name] = i
		if e.TokenEnv == "" {
			return nil, fieldErrorf(where, "token_env", "missing (the name of the variable that holds the token)")
		}
		b := Bot{Name: e.Name, TokenEnv: e.TokenEnv, Token: os.Getenv(e.TokenEnv), AllowedUpdates: e.AllowedUpdates}
		if e.Timeout != "" {
			d, err := time.ParseDuration(e.Timeout)
			if err != nil || d < time.Second || d > 50*time.Second {
				return nil, fieldErrorf(where, "timeout", "%q is not a long-poll timeout between 1s and 50s", e.Timeout)
			}
			b.PollTimeout = d
		}
		out = append(out, b)
	}
	return out, nil
}

func (o OutboxSection) routes() ([]outbox.Route, error) {
	out := make([]outbox.Route, 0, len(o.Routes))
	for i, e := range o.Routes {
		r := outbox.Route{Topic: e.Topic, Name: e.Name, URL: e.URL, Headers: e.Headers, Workers: e.Workers}
		where := routeEntry(i, e.Name)
		if e.URL == "" {
			return nil, fieldErrorf(where, "url", "missing")
		}
		if e.SecretEnv != "" {
			secret, ok := os.LookupEnv(e.SecretEnv)
			if !ok || secret == "" {
				return nil, fieldErrorf(where, "secret_env", "%s is not set in the environment", e.SecretEnv)
			}
			keys, err := outbox.ParseSecrets(secret)
			if err != nil {
				return nil, fieldErrorf(where, "secret_env", "%s: %v", e.SecretEnv, err)
			}
			r.Secrets = keys
		}
		if e.Timeout != "" {
			d, err := time.ParseDuration(e.Timeout)
			if err != nil || d <= 0 {
				return nil, fieldErrorf(where, "timeout", "%q is not a positive duration like 10s", e.Timeout)
			}
			r.Timeout = d
		}
		out = append(out, r)
	}
	// The outbox's own checks (topic, name, url, unique names), named as
	// the file's entries.
	if _, err := outbox.NewRoutes(out...); err != nil {
		var re *outbox.RouteError
		if !errors.As(err, &re) {
			return nil, err
		}
		return nil, &FieldError{Entry: routeEntry(re.Index, re.Name), Err: re.Err}
	}
	return out, nil
}

func (f File) schedules(kinds Kinds) ([]periodic.Schedule, error) {
	out := make([]periodic.Schedule, 0, len(f.Schedules))
	seen := map[string]int{}
	for i, e := range f.Schedules {
		where := scheduleEntry(i, e.ID)
		s, err := e.schedule(where, kinds)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[e.ID]; dup {
			return nil, fieldErrorf(where, "id", "already used by schedules[%d]", j)
		}
		seen[e.ID] = i
		out = append(out, s)
	}
	// The scheduler's own checks (id pattern, catch_up, overlap …), named
	// as the file's entries.
	if _, err := periodic.ValidateSchedules(out); err != nil {
		var se *periodic.ScheduleError
		if !errors.As(err, &se) {
			return nil, err
		}
		return nil, &FieldError{Entry: scheduleEntry(se.Index, se.ID), Err: se.Err}
	}
	return out, nil
}

// schedule turns the entry into a schedule; where names the entry in its
// errors.
func (e ScheduleEntry) schedule(where string, kinds Kinds) (periodic.Schedule, error) {
	s := periodic.Schedule{ID: e.ID, Name: e.Name, CatchUp: periodic.CatchUp(e.CatchUp), Overlap: periodic.Overlap(e.Overlap)}
	if e.ID == "" {
		return s, fieldErrorf(where, "id", "missing")
	}
	var err error
	switch {
	case e.Every != "" && e.Cron != "":
		return s, fieldErrorf(where, "every, cron", "give one, not both")
	case e.Every != "":
		if e.Zone != "" {
			return s, fieldErrorf(where, "zone", "only for cron (every is aligned to UTC)")
		}
		if s.Trigger, err = periodic.ParseEvery(e.Every); err != nil {
			return s, &FieldError{Entry: where, Field: "every", Err: err}
		}
	case e.Cron != "":
		if s.Trigger, err = periodic.ParseCron(e.Cron, e.Zone); err != nil {
			if ze := (*periodic.ZoneError)(nil); errors.As(err, &ze) {
				return s, fieldErrorf(where, "zone", "%q: %s", ze.Zone, ze.Reason)
			}
			return s, &FieldError{Entry: where, Field: "cron", Err: err}
		}
	default:
		return s, fieldErrorf(where, "every, cron", "give one")
	}
	if e.Kind == "" {
		return s, fieldErrorf(where, "kind", "missing")
	}
	kind, ok := kinds.Get(e.Kind)
	if !ok {
		return s, fieldErrorf(where, "kind", "%q is not a job kind this worker runs", e.Kind)
	}
	raw := []byte("{}")
	if e.Args != nil {
		if raw, err = json.Marshal(e.Args); err != nil {
			return s, &FieldError{Entry: where, Field: "args", Err: err}
		}
	}
	if s.Args, err = jobs.ParseRaw(e.Kind, raw); err != nil {
		return s, &FieldError{Entry: where, Field: "args", Err: err}
	}
	queue := kind.Queue
	if e.Queue != "" {
		if err := jobs.ValidateQueueName(e.Queue); err != nil {
			return s, &FieldError{Entry: where, Field: "queue", Err: err}
		}
		queue = e.Queue
	}
	s.InsertOpts = &river.InsertOpts{Queue: queue}
	if e.Misfire != "" {
		if s.Misfire, err = time.ParseDuration(e.Misfire); err != nil || s.Misfire <= 0 {
			return s, fieldErrorf(where, "misfire", "%q is not a positive duration like 15m", e.Misfire)
		}
	}
	return s, nil
}

// decode reads the YAML document into a File. A document that is not YAML
// is one line saying where; otherwise every problem is found, as the
// decoder's strict mode finds them, and the first is returned with how many
// more there are.
func decode(b []byte) (File, error) {
	var (
		f        File
		doc      yaml.Node
		problems []error
	)
	if err := yaml.NewDecoder(bytes.NewReader(b)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil // an empty file
		}
		return f, yamlError(b, err)
	}
	check(&doc, reflect.TypeFor[File](), &problems)
	if err := doc.Decode(&f); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return f, yamlError(b, err) // the decoder gave up: that is the problem
		}
		if len(problems) == 0 { // any the walk does not see
			problems = typeErrors(te)
		}
	}
	switch len(problems) {
	case 0:
		return f, nil
	case 1:
		return f, problems[0]
	}
	return f, fmt.Errorf("%w (and %d more)", problems[0], len(problems)-1)
}

// yamlError is an error of the YAML parser on one line, without the
// decoder's "yaml: " prefix, at the line at fault. The parser's errors have
// no type to read the position from, and the line they name is where the
// enclosing block began when there is one (a key indented wrong on line 4
// of a list item is reported at the item's line): the line at fault is the
// first at which the document, cut after it, fails the same way.
func yamlError(b []byte, err error) error {
	msg := strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), "yaml: ")), " ")
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return errors.New(msg)
	}
	what := m[2]
	lines := bytes.SplitAfter(b, []byte("\n"))
	for k := 1; k <= len(lines); k++ {
		var n yaml.Node
		err := yaml.Unmarshal(bytes.Join(lines[:k], nil), &n)
		if err != nil && strings.HasSuffix(strings.Join(strings.Fields(err.Error()), " "), what) {
			return fmt.Errorf("line %d: %s", k, what)
		}
	}
	return errors.New(msg)
}

// yamlLineRE reads a YAML parser error: "line N: what".
var yamlLineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// check appends to problems what the YAML decoder refuses in strict mode
// when it decodes n into a value of type t, in the order it meets them: a
// key that names no field, as an *UnknownKeyError, and a value of the
// wrong type, in the decoder's words. It walks the mappings decoded into
// structs and the sequences decoded into slices, and has the decoder try
// everything else.
func check(n *yaml.Node, t reflect.Type, problems *[]error) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.DocumentNode:
		for _, c := range n.Content {
			check(c, t, problems)
		}
	case n.Kind == yaml.SequenceNode && t.Kind() == reflect.Slice:
		for _, c := range n.Content {
			check(c, t.Elem(), problems)
		}
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct && !repeatsKey(n):
		checkStruct(n, t, nil, problems)
	default:
		var te *yaml.TypeError
		if err := n.Decode(reflect.New(t).Interface()); errors.As(err, &te) {
			*problems = append(*problems, typeErrors(te)...)
		}
	}
}

// checkStruct is check of mapping n decoded into struct type t. As the
// decoder does, it takes the keys merged in with << after the mapping's
// own; along a chain of merges, merged is the set of keys met so far, which
// a merged mapping does not set again (nil outside a merge).
func checkStruct(n *yaml.Node, t reflect.Type, merged map[string]bool, problems *[]error) {
	var merge *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			check(k, reflect.TypeFor[string](), problems) // not a name
			continue
		case k.Value == "<<" && k.ShortTag() == "!!merge":
			merge = v
			continue
		case merged != nil && merged[k.Value]:
			continue
		case merged != nil:
			merged[k.Value] = true
		}
		f, ok := fieldByKey(t, k.Value)
		if !ok {
			*problems = append(*problems, &UnknownKeyError{Line: k.Line, Key: k.Value})
			continue
		}
		check(v, f.Type, problems)
	}
	if merge == nil {
		return
	}
	if merged == nil {
		merged = map[string]bool{}
		for i := 0; i < len(n.Content); i += 2 {
			merged[n.Content[i].Value] = true
		}
	}
	sources := []*yaml.Node{merge}
	if merge.Kind == yaml.SequenceNode {
		sources = merge.Content
	}
	for _, m := range sources {
		if m.Kind == yaml.AliasNode && m.Alias != nil {
			m = m.Alias
		}
		switch {
		case m.Kind != yaml.MappingNode:
			// The decoder refuses the merge: that error is the one
			// reported.
		case repeatsKey(m):
			check(m, t, problems)
		default:
			checkStruct(m, t, merged, problems)
		}
	}
}

// typeErrors are the decoder's messages of te, one error each.
func typeErrors(te *yaml.TypeError) []error {
	out := make([]error, len(te.Errors))
	for i, msg := range te.Errors {
		out[i] = errors.New(strings.TrimSpace(msg))
	}
	return out
}

// repeatsKey reports whether mapping n has a key twice: the decoder's
// error for the whole mapping.
func repeatsKey(n *yaml.Node) bool {
	type key struct {
		kind  yaml.Kind
		value string
	}
	seen := map[key]bool{}
	for i := 0; i < len(n.Content); i += 2 {
		k := key{n.Content[i].Kind, n.Content[i].Value}
		if seen[k] {
			return true
		}
		seen[k] = true
	}
	return false
}

// fieldByKey returns the field of struct type t that YAML key names: by its
// yaml tag, else its name in lower case.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if f.IsExported() && name == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
