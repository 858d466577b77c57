// Package config reads the worker's YAML file (FERRY_CONFIG): schedules,
// outbox routes and Telegram bots. Unknown keys,
// unknown job kinds, bad expressions or zones and duplicate ids are refused
// with one line naming the entry and the field. Secrets are never written in
// the file, only the names of the environment variables that hold them.
package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"go.yaml.in/yaml/v3"

	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// File is the YAML document.
type File struct {
	Schedules []ScheduleEntry `yaml:"schedules"`
	Outbox    OutboxSection   `yaml:"outbox"`
	Telegram  TelegramSection `yaml:"telegram"`
}

// TelegramSection is the `telegram:` section.
type TelegramSection struct {
	Bots []BotEntry `yaml:"bots"`
}

// BotEntry is one `telegram.bots` item.
type BotEntry struct {
	Name           string   `yaml:"name"`
	TokenEnv       string   `yaml:"token_env"`
	AllowedUpdates []string `yaml:"allowed_updates"`
	Timeout        string   `yaml:"timeout"`
}

// Bot is a configured bot. Token is empty when its variable is unset: the
// bot stays off, and the worker says so in one line.
type Bot struct {
	Name           string
	TokenEnv       string
	Token          string
	AllowedUpdates []string
	PollTimeout    time.Duration
}

// OutboxSection is the `outbox:` section.
type OutboxSection struct {
	MaxAttempts int          `yaml:"max_attempts"`
	Routes      []RouteEntry `yaml:"routes"`
}

// RouteEntry is one `outbox.routes` item: a webhook for a topic.
type RouteEntry struct {
	Topic     string            `yaml:"topic"`
	Name      string            `yaml:"name"`
	URL       string            `yaml:"url"`
	SecretEnv string            `yaml:"secret_env"`
	Timeout   string            `yaml:"timeout"`
	Headers   map[string]string `yaml:"headers"`
}

// Loaded is what a file configures.
type Loaded struct {
	Schedules         []periodic.Schedule
	Routes            []outbox.Route
	OutboxMaxAttempts int // 0 when the file does not set it
	Bots              []Bot
}

// ScheduleEntry is one `schedules:` item (keys as in DESIGN.md, "Config
// file").
type ScheduleEntry struct {
	ID      string         `yaml:"id"`
	Name    string         `yaml:"name"`
	Every   string         `yaml:"every"`
	Cron    string         `yaml:"cron"`
	Zone    string         `yaml:"zone"`
	Kind    string         `yaml:"kind"`
	Args    map[string]any `yaml:"args"`
	Queue   string         `yaml:"queue"`
	CatchUp string         `yaml:"catch_up"`
	Misfire string         `yaml:"misfire"`
	Overlap string         `yaml:"overlap"`
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
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return Loaded{}, yamlError(err)
	}
	bots, err := f.Telegram.bots()
	if err != nil {
		return Loaded{}, err
	}
	schedules, err := f.schedules(kinds)
	if err != nil {
		return Loaded{}, err
	}
	routes, err := f.Outbox.routes()
	if err != nil {
		return Loaded{}, err
	}
	if f.Outbox.MaxAttempts < 0 || f.Outbox.MaxAttempts > 1000 {
		return Loaded{}, fmt.Errorf("outbox: max_attempts: %d is not between 1 and 1000", f.Outbox.MaxAttempts)
	}
	return Loaded{Schedules: schedules, Routes: routes, OutboxMaxAttempts: f.Outbox.MaxAttempts, Bots: bots}, nil
}

func (t TelegramSection) bots() ([]Bot, error) {
	out := make([]Bot, 0, len(t.Bots))
	seen := map[string]int{}
	for i, e := range t.Bots {
		where := fmt.Sprintf("telegram.bots[%d] (name %q)", i, e.Name)
		if err := telegram.ValidateBotName(e.Name); err != nil {
			return nil, fmt.Errorf("%s: name: %w", where, err)
		}
		if j, dup := seen[e.Name]; dup {
			return nil, fmt.Errorf("%s: name: already used by telegram.bots[%d]", where, j)
		}
		seen[e.Name] = i
		if e.TokenEnv == "" {
			return nil, fmt.Errorf("%s: token_env: missing (the name of the variable that holds the token)", where)
		}
		b := Bot{Name: e.Name, TokenEnv: e.TokenEnv, Token: os.Getenv(e.TokenEnv), AllowedUpdates: e.AllowedUpdates}
		if e.Timeout != "" {
			d, err := time.ParseDuration(e.Timeout)
			if err != nil || d < time.Second || d > 50*time.Second {
				return nil, fmt.Errorf("%s: timeout: %q is not a long-poll timeout between 1s and 50s", where, e.Timeout)
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
		r := outbox.Route{Topic: e.Topic, Name: e.Name, URL: e.URL, Headers: e.Headers}
		where := fmt.Sprintf("outbox.routes[%d] (name %q)", i, e.Name)
		if e.URL == "" {
			return nil, fmt.Errorf("%s: url: missing", where)
		}
		if e.SecretEnv != "" {
			secret, ok := os.LookupEnv(e.SecretEnv)
			if !ok || secret == "" {
				return nil, fmt.Errorf("%s: secret_env: %s is not set in the environment", where, e.SecretEnv)
			}
			r.Secret = []byte(secret)
		}
		if e.Timeout != "" {
			d, err := time.ParseDuration(e.Timeout)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("%s: timeout: %q is not a positive duration like 10s", where, e.Timeout)
			}
			r.Timeout = d
		}
		out = append(out, r)
	}
	// The outbox's own checks (topic, name, url, unique names), with the
	// file's indexes in the message.
	if _, err := outbox.NewRoutes(out...); err != nil {
		msg := err.Error()
		if rest, ok := strings.CutPrefix(msg, "route "); ok {
			msg = "outbox.routes[" + strings.Replace(rest, " ", "] ", 1)
		}
		return nil, errors.New(msg)
	}
	return out, nil
}

func (f File) schedules(kinds Kinds) ([]periodic.Schedule, error) {
	out := make([]periodic.Schedule, 0, len(f.Schedules))
	seen := map[string]int{}
	for i, e := range f.Schedules {
		s, err := e.schedule(kinds)
		if err != nil {
			return nil, fmt.Errorf("schedules[%d] (id %q): %w", i, e.ID, err)
		}
		if j, dup := seen[e.ID]; dup {
			return nil, fmt.Errorf("schedules[%d] (id %q): id: already used by schedules[%d]", i, e.ID, j)
		}
		seen[e.ID] = i
		out = append(out, s)
	}
	// The scheduler's own checks (id pattern, catch_up, overlap …), with
	// the file's indexes in the message.
	for i, s := range out {
		if _, err := periodic.ValidateSchedules([]periodic.Schedule{s}); err != nil {
			return nil, fmt.Errorf("schedules[%d] (id %q): %s", i, s.ID, strings.TrimPrefix(err.Error(), fmt.Sprintf("schedule 0 (id %q): ", s.ID)))
		}
	}
	return out, nil
}

func (e ScheduleEntry) schedule(kinds Kinds) (periodic.Schedule, error) {
	s := periodic.Schedule{ID: e.ID, Name: e.Name, CatchUp: periodic.CatchUp(e.CatchUp), Overlap: periodic.Overlap(e.Overlap)}
	if e.ID == "" {
		return s, errors.New("id: missing")
	}
	var err error
	switch {
	case e.Every != "" && e.Cron != "":
		return s, errors.New("every, cron: give one, not both")
	case e.Every != "":
		if e.Zone != "" {
			return s, errors.New("zone: only for cron (every is aligned to UTC)")
		}
		if s.Trigger, err = periodic.ParseEvery(e.Every); err != nil {
			return s, fmt.Errorf("every: %w", err)
		}
	case e.Cron != "":
		if s.Trigger, err = periodic.ParseCron(e.Cron, e.Zone); err != nil {
			return s, fmt.Errorf("cron: %w", err)
		}
	default:
		return s, errors.New("every, cron: give one")
	}
	if e.Kind == "" {
		return s, errors.New("kind: missing")
	}
	kind, ok := kinds.Get(e.Kind)
	if !ok {
		return s, fmt.Errorf("kind: %q is not a job kind this worker runs", e.Kind)
	}
	raw := []byte("{}")
	if e.Args != nil {
		if raw, err = json.Marshal(e.Args); err != nil {
			return s, fmt.Errorf("args: %w", err)
		}
	}
	if s.Args, err = jobs.ParseRaw(e.Kind, raw); err != nil {
		return s, fmt.Errorf("args: %w", err)
	}
	queue := kind.Queue
	if e.Queue != "" {
		if err := jobs.ValidateQueueName(e.Queue); err != nil {
			return s, fmt.Errorf("queue: %w", err)
		}
		queue = e.Queue
	}
	s.InsertOpts = &river.InsertOpts{Queue: queue}
	if e.Misfire != "" {
		if s.Misfire, err = time.ParseDuration(e.Misfire); err != nil || s.Misfire <= 0 {
			return s, fmt.Errorf("misfire: %q is not a positive duration like 15m", e.Misfire)
		}
	}
	return s, nil
}

var fieldNotFoundRE = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlError turns the YAML decoder's (possibly multi-line) error into one
// line naming the first problem.
func yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg := strings.TrimSpace(te.Errors[0])
		msg = fieldNotFoundRE.ReplaceAllString(msg, "unknown key $1")
		if len(te.Errors) > 1 {
			msg += fmt.Sprintf(" (and %d more)", len(te.Errors)-1)
		}
		return errors.New(msg)
	}
	return errors.New(strings.Join(strings.Fields(strings.TrimPrefix(err.Error(), "yaml: ")), " "))
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
