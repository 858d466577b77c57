// Package config reads the worker's YAML file (FERRY_CONFIG): schedules now;
// outbox routes and Telegram bots as those capabilities arrive. Unknown keys,
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
	"github.com/ferryq/ferry/periodic"
)

// File is the YAML document.
type File struct {
	Schedules []ScheduleEntry `yaml:"schedules"`
	// Outbox and Telegram are recognised so that a file written for a later
	// build is refused with a clear line rather than half-applied.
	Outbox   yaml.Node `yaml:"outbox"`
	Telegram yaml.Node `yaml:"telegram"`
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

// Load reads path and returns its schedules, checked against kinds. An
// empty path means no file.
func Load(path string, kinds Kinds) ([]periodic.Schedule, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, unwrapPathError(err))
	}
	schedules, err := Parse(b, kinds)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return schedules, nil
}

// Parse reads a YAML document (see Load).
func Parse(b []byte, kinds Kinds) ([]periodic.Schedule, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, yamlError(err)
	}
	if !f.Outbox.IsZero() {
		return nil, errors.New("outbox: this build of ferry has no outbox yet; remove the section")
	}
	if !f.Telegram.IsZero() {
		return nil, errors.New("telegram: this build of ferry has no Telegram support yet; remove the section")
	}
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
