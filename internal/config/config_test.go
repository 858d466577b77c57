package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
)

func registry(t *testing.T) *jobs.Registry {
	t.Helper()
	r := &jobs.Registry{}
	require.NoError(t, r.Add(jobs.Builtin()...))
	return r
}

const good = `
schedules:
  - id: booking-reminders            # stable: the tick key in ferry_periodic_tick
    name: Send booking reminder SMS  # what monitors match; keep it stable
    every: 15m
    kind: http.request
    args: {method: POST, url: "http://app:8000/internal/reminders", timeout: 30s}
    queue: default
    catch_up: last
    misfire: 15m
    overlap: skip
  - id: nightly
    cron: "0 6 * * *"
    zone: Europe/Madrid
    kind: ferry.noop
    catch_up: none
    overlap: allow
`

func TestParse(t *testing.T) {
	t.Parallel()
	loaded, err := Parse([]byte(good), registry(t))
	require.NoError(t, err)
	got := loaded.Schedules
	require.Len(t, got, 2)

	b := got[0]
	require.Equal(t, "booking-reminders", b.ID)
	require.Equal(t, "Send booking reminder SMS", b.Name)
	require.Equal(t, 15*time.Minute, b.Trigger.Interval())
	require.Equal(t, "http.request", b.Args.Kind())
	require.JSONEq(t, `{"method":"POST","url":"http://app:8000/internal/reminders","timeout":"30s"}`, string(b.Args.(jobs.RawArgs).JSON))
	require.Equal(t, "default", b.InsertOpts.Queue)
	require.Equal(t, periodic.CatchUpLast, b.CatchUp)
	require.Equal(t, 15*time.Minute, b.Misfire)
	require.Equal(t, periodic.OverlapSkip, b.Overlap)

	n := got[1]
	require.Equal(t, "Europe/Madrid", n.Trigger.Zone())
	require.Equal(t, periodic.CatchUpNone, n.CatchUp)
	require.Equal(t, periodic.OverlapAllow, n.Overlap)
	require.JSONEq(t, `{}`, string(n.Args.(jobs.RawArgs).JSON))

	empty, err := Parse([]byte(""), registry(t))
	require.NoError(t, err)
	require.Empty(t, empty.Schedules)
	require.Empty(t, empty.Routes)
}

func TestParse_Errors(t *testing.T) {
	t.Parallel()
	entry := func(lines ...string) string {
		return "schedules:\n  - id: x\n" + "    " + strings.Join(lines, "\n    ") + "\n"
	}
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown top-level key":  {"schedule:\n  - id: x\n", "unknown key schedule"},
		"unknown entry key":      {entry("every: 1m", "kind: ferry.noop", "timezone: UTC"), "unknown key timezone"},
		"no id":                  {"schedules:\n  - every: 1m\n    kind: ferry.noop\n", `schedules[0] (id ""): id: missing`},
		"bad id":                 {"schedules:\n  - id: has space\n    every: 1m\n    kind: ferry.noop\n", `schedules[0] (id "has space"): id`},
		"no trigger":             {entry("kind: ferry.noop"), "every, cron: give one"},
		"both triggers":          {entry("every: 1m", `cron: "* * * * *"`, "kind: ferry.noop"), "every, cron: give one, not both"},
		"bad every":              {entry("every: often", "kind: ferry.noop"), `schedules[0] (id "x"): every:`},
		"bad cron":               {entry(`cron: "61 * * * *"`, "kind: ferry.noop"), "cron: " + `cron "61 * * * *": minute field`},
		"bad zone":               {entry(`cron: "0 6 * * *"`, "zone: Mars/Olympus", "kind: ferry.noop"), `schedules[0] (id "x"): zone: "Mars/Olympus": unknown time zone`},
		"local zone":             {entry(`cron: "0 6 * * *"`, "zone: Local", "kind: ferry.noop"), `schedules[0] (id "x"): zone: "Local": want an IANA name`},
		"zone with every":        {entry("every: 1m", "zone: UTC", "kind: ferry.noop"), "zone: only for cron"},
		"unknown kind":           {entry("every: 1m", "kind: email.send"), `kind: "email.send" is not a job kind this worker runs`},
		"no kind":                {entry("every: 1m"), "kind: missing"},
		"bad args":               {entry("every: 1m", "kind: ferry.noop", "args: {colour: red}"), `args: args do not fit ferry.noop: json: unknown field "colour"`},
		"bad http args":          {entry("every: 1m", "kind: http.request", "args: {url: /relative}"), "args: http.request: url"},
		"bad queue":              {entry("every: 1m", "kind: ferry.noop", "queue: Bad Queue"), "queue:"},
		"bad catch_up":           {entry("every: 1m", "kind: ferry.noop", "catch_up: all"), `catch_up "all": want last or none`},
		"bad overlap":            {entry("every: 1m", "kind: ferry.noop", "overlap: queue"), `overlap "queue": want skip or allow`},
		"bad misfire":            {entry("every: 1m", "kind: ferry.noop", "misfire: soon"), `misfire: "soon"`},
		"duplicate id":           {"schedules:\n  - {id: x, every: 1m, kind: ferry.noop}\n  - {id: x, every: 2m, kind: ferry.noop}\n", `schedules[1] (id "x"): id: already used by schedules[0]`},
		"route without url":      {"outbox:\n  routes:\n    - {topic: a, name: r}\n", `outbox.routes[0] (name "r"): url: missing`},
		"route bad topic":        {"outbox:\n  routes:\n    - {topic: 'a b', name: r, url: 'http://x/'}\n", `outbox.routes[0] (name "r"): topic "a b"`},
		"route bad url":          {"outbox:\n  routes:\n    - {topic: a, name: r, url: '/hook'}\n", `outbox.routes[0] (name "r"): url "/hook"`},
		"route secret unset":     {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/', secret_env: FERRY_TEST_SURELY_UNSET}\n", "secret_env: FERRY_TEST_SURELY_UNSET is not set"},
		"route bad timeout":      {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/', timeout: soon}\n", `timeout: "soon"`},
		"route negative workers": {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/', workers: -1}\n", `outbox.routes[0] (name "r"): workers -1: between 1 and 10000 (0 or none: the process's default)`},
		"route too many workers": {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/', workers: 10001}\n", `outbox.routes[0] (name "r"): workers 10001: between 1 and 10000`},
		"route duplicate name":   {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/'}\n    - {topic: b, name: r, url: 'http://y/'}\n", `outbox.routes[1] (name "r"): name: already used`},
		"route unknown key":      {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/', secret: s3cret}\n", "unknown key secret"},
		"max attempts":           {"outbox:\n  max_attempts: -1\n", "outbox: max_attempts: -1"},
		"bot bad name":           {"telegram:\n  bots:\n    - {name: Desk Bot, token_env: T}\n", `telegram.bots[0] (name "Desk Bot"): name`},
		"bot no token_env":       {"telegram:\n  bots:\n    - {name: desk}\n", "token_env: missing"},
		"bot token in file":      {"telegram:\n  bots:\n    - {name: desk, token: '123:abc'}\n", "unknown key token"},
		"bot duplicate":          {"telegram:\n  bots:\n    - {name: desk, token_env: A}\n    - {name: desk, token_env: B}\n", `telegram.bots[1] (name "desk"): name: already used`},
		"bot bad timeout":        {"telegram:\n  bots:\n    - {name: desk, token_env: A, timeout: 2m}\n", `timeout: "2m"`},
		"queue bad name":         {"queues:\n  - {name: Bad Queue, max_length: 1}\n", `queues[0] (name "Bad Queue"): name`},
		"queue negative bound":   {"queues:\n  - {name: reports, max_length: -1}\n", `queues[0] (name "reports"): max_length: -1 is negative`},
		"queue bound not int":    {"queues:\n  - {name: reports, max_length: lots}\n", "cannot unmarshal"},
		"queue bad workers":      {"queues:\n  - {name: reports, workers: -2}\n", `queues[0] (name "reports"): workers: -2 is not between 1 and`},
		"queue empty":            {"queues:\n  - {name: reports}\n", "workers, max_length: give one or both"},
		"queue duplicate":        {"queues:\n  - {name: reports, workers: 2}\n  - {name: reports, max_length: 5}\n", `queues[1] (name "reports"): name: already used by queues[0]`},
		"queue unknown key":      {"queues:\n  - {name: reports, max_len: 5}\n", "unknown key max_len"},
		"not yaml":               {"schedules: [", "did not find expected"},
		"wrong type":             {"schedules: {id: x}\n", "cannot unmarshal"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.doc), registry(t))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "\n", "one line")
		})
	}
}

// TestParse_YAMLErrorLine: a document the YAML parser refuses is reported
// at the line at fault, not at the line where the enclosing block began.
func TestParse_YAMLErrorLine(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ doc, want string }{
		"key indented less": {"schedules:\n  - id: a\n    every: 1m\n   kind: ferry.noop\n", "line 4: did not find expected '-' indicator"},
		"key out of item":   {"schedules:\n  - id: a\n    every: 1m\n  kind: ferry.noop\n", "line 4: did not find expected '-' indicator"},
		"tab":               {"schedules:\n  - id: a\n    every: 1m\n\tkind: ferry.noop\n", "line 4: found a tab character that violates indentation"},
		"key indented more": {"schedules:\n  - id: a\n    every: 1m\n      kind: ferry.noop\n", "line 4: mapping values are not allowed in this context"},
		"no colon":          {"schedules:\n  - id: a\n    every: 1m\n    kind: ferry.noop\n  x\n", "line 5: could not find expected ':'"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(tc.doc), registry(t))
			require.EqualError(t, err, tc.want)
		})
	}
}

// parseError parses doc, which must fail with an E, and returns that E and
// the error.
func parseError[E error](t *testing.T, doc string) (E, error) {
	t.Helper()
	_, err := Parse([]byte(doc), registry(t))
	var e E
	require.ErrorAs(t, err, &e)
	return e, err
}

func TestParse_FieldError(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		doc          string
		entry, field string
	}{
		"schedule field":        {"schedules:\n  - {id: a, every: 1m, kind: ferry.noop}\n  - {id: b, every: 1m, kind: email.send}\n", `schedules[1] (id "b")`, "kind"},
		"schedule trigger":      {"schedules:\n  - {id: a, cron: '61 * * * *', kind: ferry.noop}\n", `schedules[0] (id "a")`, "cron"},
		"scheduler's own check": {"schedules:\n  - {id: a, every: 1m, kind: ferry.noop}\n  - {id: b, every: 1m, kind: ferry.noop, catch_up: all}\n", `schedules[1] (id "b")`, ""},
		"duplicate schedule":    {"schedules:\n  - {id: a, every: 1m, kind: ferry.noop}\n  - {id: a, every: 2m, kind: ferry.noop}\n", `schedules[1] (id "a")`, "id"},
		"route field":           {"outbox:\n  routes:\n    - {topic: a, name: r}\n", `outbox.routes[0] (name "r")`, "url"},
		"outbox's own check":    {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/'}\n    - {topic: 'b c', name: s, url: 'http://y/'}\n", `outbox.routes[1] (name "s")`, ""},
		"duplicate route":       {"outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/'}\n    - {topic: b, name: r, url: 'http://y/'}\n", `outbox.routes[1] (name "r")`, ""},
		"section":               {"outbox:\n  max_attempts: 1001\n", "outbox", "max_attempts"},
		"bot":                   {"telegram:\n  bots:\n    - {name: desk}\n", `telegram.bots[0] (name "desk")`, "token_env"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fe, _ := parseError[*FieldError](t, tc.doc)
			require.Equal(t, tc.entry, fe.Entry)
			require.Equal(t, tc.field, fe.Field)
			require.Error(t, fe.Unwrap())
		})
	}

	t.Run("the file names the entry, not the scheduler or the outbox", func(t *testing.T) {
		t.Parallel()
		_, err := Parse([]byte("schedules:\n  - {id: a, every: 1m, kind: ferry.noop, catch_up: all}\n"), registry(t))
		var se *periodic.ScheduleError
		require.False(t, errors.As(err, &se), "the scheduler's index is replaced by the file's entry")
		_, err = Parse([]byte("outbox:\n  routes:\n    - {topic: 'a b', name: r, url: 'http://x/'}\n"), registry(t))
		var re *outbox.RouteError
		require.False(t, errors.As(err, &re), "the outbox's index is replaced by the file's entry")
	})
}

func TestParse_UnknownKey(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		doc  string
		line int
		key  string
		more int
	}{
		"top level":        {"schedule:\n  - id: x\n", 1, "schedule", 0},
		"in an entry":      {"schedules:\n  - id: x\n    every: 1m\n    timezone: UTC\n    colour: red\n", 4, "timezone", 1},
		"a secret":         {"telegram:\n  bots:\n    - name: desk\n      token: '123:abc'\n", 4, "token", 0},
		"merged in":        {"schedules:\n  - &a {id: a, kind: ferry.noop, every: 1m, foo: 1}\n  - <<: *a\n    id: b\n", 2, "foo", 1},
		"before bad value": {"schedules:\n  - id: x\n    foo: 1\n    misfire: [1]\n", 3, "foo", 1},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			uk, err := parseError[*UnknownKeyError](t, tc.doc)
			require.Equal(t, tc.line, uk.Line)
			require.Equal(t, tc.key, uk.Key)
			if tc.more > 0 {
				require.Equal(t, fmt.Sprintf("%s (and %d more)", uk, tc.more), err.Error())
			} else {
				require.Equal(t, uk.Error(), err.Error())
			}
		})
	}

	t.Run("a value of the wrong type before it comes first", func(t *testing.T) {
		t.Parallel()
		_, err := Parse([]byte("schedules:\n  - id: x\n    misfire: [1]\n    foo: 1\n"), registry(t))
		var uk *UnknownKeyError
		require.False(t, errors.As(err, &uk))
		require.ErrorContains(t, err, "line 3: cannot unmarshal")
		require.ErrorContains(t, err, "(and 1 more)")
	})

	t.Run("merge keys are not unknown", func(t *testing.T) {
		t.Parallel()
		loaded, err := Parse([]byte("schedules:\n  - &a {id: a, kind: ferry.noop, every: 1m}\n  - <<: *a\n    id: b\n"), registry(t))
		require.NoError(t, err)
		require.Len(t, loaded.Schedules, 2)
		require.Equal(t, "b", loaded.Schedules[1].ID)
		require.Equal(t, "ferry.noop", loaded.Schedules[1].Args.Kind())
	})
}

func TestLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "ferry.yaml")
	require.NoError(t, os.WriteFile(path, []byte(good), 0o600))
	got, err := Load(path, registry(t))
	require.NoError(t, err)
	require.Len(t, got.Schedules, 2)

	none, err := Load("", registry(t))
	require.NoError(t, err)
	require.Empty(t, none.Schedules)

	_, err = Load(filepath.Join(dir, "missing.yaml"), registry(t))
	require.ErrorContains(t, err, "missing.yaml: no such file or directory")

	require.NoError(t, os.WriteFile(path, []byte("schedules:\n  - id: x\n    every: 1m\n    kind: nope\n"), 0o600))
	_, err = Load(path, registry(t))
	require.ErrorContains(t, err, "config "+path+`: schedules[0] (id "x"): kind: "nope"`)
}

func TestDemoConfig(t *testing.T) {
	// The file `go tool task up` runs with must stay valid.
	t.Setenv("DEMO_HOOK_SECRET", "demo")
	got, err := Load(filepath.Join("..", "..", "examples", "demo.yaml"), registry(t))
	require.NoError(t, err)
	require.NotEmpty(t, got.Schedules)
}

func TestParse_Routes(t *testing.T) {
	t.Setenv("BILLING_HOOK_SECRET", "s3cret")
	doc := `
outbox:
  max_attempts: 5
  routes:
    - topic: order.placed
      name: billing
      url: http://billing:8080/hooks/order
      secret_env: BILLING_HOOK_SECRET
      timeout: 3s
      headers: {X-Team: billing}
      workers: 8
`
	loaded, err := Parse([]byte(doc), registry(t))
	require.NoError(t, err)
	require.Equal(t, 5, loaded.OutboxMaxAttempts)
	require.Len(t, loaded.Routes, 1)
	r := loaded.Routes[0]
	require.Equal(t, "order.placed", r.Topic)
	require.Equal(t, "billing", r.Name)
	require.Equal(t, [][]byte{[]byte("s3cret")}, r.Secrets)
	require.Equal(t, 3*time.Second, r.Timeout)
	require.Equal(t, map[string]string{"X-Team": "billing"}, r.Headers)
	require.Equal(t, 8, r.Workers)
}

// TestParse_RouteSecrets: secret_env holds one secret or several (a
// rotation), each raw or whsec_; a bad one is one line that never quotes it.
func TestParse_RouteSecrets(t *testing.T) {
	doc := "outbox:\n  routes:\n    - {topic: a, name: r, url: 'http://x/', secret_env: FERRY_TEST_HOOK_SECRETS}\n"
	t.Setenv("FERRY_TEST_HOOK_SECRETS", "whsec_a2V5, raw-old")
	loaded, err := Parse([]byte(doc), registry(t))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("key"), []byte("raw-old")}, loaded.Routes[0].Secrets)

	t.Setenv("FERRY_TEST_HOOK_SECRETS", "raw-old,whsec_s3cr3t+not+b64!")
	_, err = Parse([]byte(doc), registry(t))
	require.EqualError(t, err, `outbox.routes[0] (name "r"): secret_env: FERRY_TEST_HOOK_SECRETS: secret 2 of 2: starts with whsec_ but the rest is not standard base64`)
}

func TestParse_Bots(t *testing.T) {
	t.Setenv("DESK_TELEGRAM_BOT_TOKEN", "123:desk-token")
	loaded, err := Parse([]byte(`
telegram:
  bots:
    - name: desk
      token_env: DESK_TELEGRAM_BOT_TOKEN
      allowed_updates: [message, callback_query]
      timeout: 20s
    - name: accounting
      token_env: FERRY_TEST_UNSET_TOKEN_VAR
`), registry(t))
	require.NoError(t, err)
	require.Len(t, loaded.Bots, 2)
	require.Equal(t, Bot{Name: "desk", TokenEnv: "DESK_TELEGRAM_BOT_TOKEN", Token: "123:desk-token", AllowedUpdates: []string{"message", "callback_query"}, PollTimeout: 20 * time.Second}, loaded.Bots[0])
	require.Empty(t, loaded.Bots[1].Token, "an unset token leaves the bot off, not the worker down")
}

func TestParse_Queues(t *testing.T) {
	t.Parallel()
	loaded, err := Parse([]byte("queues:\n  - {name: reports, workers: 4, max_length: 1000}\n  - {name: default, max_length: 0}\n  - {name: mail, workers: 2}\n"), registry(t))
	require.NoError(t, err)
	n1000, n0 := int64(1000), int64(0)
	require.Equal(t, []Queue{
		{Name: "reports", Workers: 4, MaxLength: &n1000},
		{Name: "default", MaxLength: &n0},
		{Name: "mail", Workers: 2},
	}, loaded.Queues)
}

func TestParse_Limits(t *testing.T) {
	t.Parallel()
	loaded, err := Parse([]byte(`limits:
  - {kind: ferry.noop, concurrency: 20}
  - {name: per-tenant, queue: reports, key: tenant_id, concurrency: 2, rate: 10/s, burst: 5}
  - {queue: mail, rate: 600/m}
`), registry(t))
	require.NoError(t, err)
	require.Equal(t, []limit.Limit{
		{Name: "kind:ferry.noop", Kind: "ferry.noop", Concurrency: 20},
		{Name: "per-tenant", Queue: "reports", KeyField: "tenant_id", Concurrency: 2, Rate: limit.Rate{Count: 10, Period: time.Second, Burst: 5}},
		{Name: "queue:mail", Queue: "mail", Rate: limit.Rate{Count: 600, Period: time.Minute, Burst: 1}},
	}, loaded.Limits)
}

func TestParse_Fairness(t *testing.T) {
	t.Parallel()
	loaded, err := Parse([]byte(`fairness:
  - {queue: reports, key: tenant_id, weights: {acme: 7, "42": 2}, default_weight: 0.5}
  - {queue: mail, key: account}
`), registry(t))
	require.NoError(t, err)
	require.Equal(t, []limit.Limit{
		{Name: "fair:reports", Queue: "reports", KeyField: "tenant_id", Fair: &limit.Fairness{Weights: map[string]float64{"acme": 7, "42": 2}, DefaultWeight: 0.5}},
		{Name: "fair:mail", Queue: "mail", KeyField: "account", Fair: &limit.Fairness{DefaultWeight: 1}},
	}, loaded.Limits)
}

func TestParse_FairnessErrors(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		"fairness:\n  - {key: t}\n":                                   `fairness[0] (queue ""): queue: queue "": a name is 1 to 64 lowercase letters and digits, separated by single _ or -`,
		"fairness:\n  - {queue: q}\n":                                 `fairness[0] (queue "q"): key: give the field of the jobs' args whose values share the queue`,
		"fairness:\n  - {queue: q, key: a.b}\n":                       `fairness[0] (queue "q"): key: "a.b" is not a field name (a letter or _, then letters, digits or _)`,
		"fairness:\n  - {queue: q, key: t, weights: {x: 0}}\n":        `fairness[0] (queue "q"): weights: "x": 0 is not between 0.001 and 1000000`,
		"fairness:\n  - {queue: q, key: t, default_weight: 0}\n":      `fairness[0] (queue "q"): default_weight: 0 is not between 0.001 and 1000000`,
		"fairness:\n  - {queue: q, key: t}\n  - {queue: q, key: u}\n": `fairness[1] (queue "q"): queue: already shared by fairness[0]`,
		"fairness:\n  - {queue: q, key: t, weight: {x: 1}}\n":         `line 2: unknown key weight`,
		"limits:\n  - {name: 'fair:q', queue: q, concurrency: 1}\n":   `limits[0] (name "fair:q"): name: "fair:q": fair: names a queue's fairness`,
	} {
		_, err := Parse([]byte(doc), registry(t))
		require.Error(t, err, doc)
		assert.Equal(t, want, err.Error(), doc)
	}
}

func TestParse_LimitErrors(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]string{
		"limits:\n  - {kind: ferry.noop}\n":                                                              `limits[0] (name "kind:ferry.noop"): concurrency, rate: give one or both`,
		"limits:\n  - {concurrency: 1}\n":                                                                `limits[0]: kind, queue: give one`,
		"limits:\n  - {kind: ferry.noop, queue: q, concurrency: 1}\n":                                    `limits[0] (name "queue:q"): kind, queue: give one, not both`,
		"limits:\n  - {kind: nope, concurrency: 1}\n":                                                    `limits[0] (name "kind:nope"): kind: "nope" is not a job kind this worker runs`,
		"limits:\n  - {queue: 'bad queue', concurrency: 1}\n":                                            `limits[0] (name "queue:bad queue"): queue: queue "bad queue": a name is 1 to 64 lowercase letters and digits, separated by single _ or -`,
		"limits:\n  - {name: 'a b', kind: ferry.noop, concurrency: 1}\n":                                 `limits[0] (name "a b"): name: "a b": use 1 to 128 letters, digits and _.:/-`,
		"limits:\n  - {kind: ferry.noop, rate: 10/d}\n":                                                  `limits[0] (name "kind:ferry.noop"): rate: "10/d": the unit "d" is not s, m or h`,
		"limits:\n  - {kind: ferry.noop, rate: ten/s}\n":                                                 `limits[0] (name "kind:ferry.noop"): rate: "ten/s": the count is not a whole number between 1 and 1000000`,
		"limits:\n  - {kind: ferry.noop, concurrency: 1, burst: 3}\n":                                    `limits[0] (name "kind:ferry.noop"): burst: a burst needs a rate`,
		"limits:\n  - {kind: ferry.noop, rate: 1/s, burst: -1}\n":                                        `limits[0] (name "kind:ferry.noop"): burst: -1 is not between 1 and 1000000`,
		"limits:\n  - {kind: ferry.noop, concurrency: -2}\n":                                             `limits[0] (name "kind:ferry.noop"): concurrency: -2 is not between 1 and 100000`,
		"limits:\n  - {kind: ferry.noop, key: a.b, concurrency: 1}\n":                                    `limits[0] (name "kind:ferry.noop/a.b"): key: "a.b" is not a field name (a letter or _, then letters, digits or _)`,
		"limits:\n  - {name: x, kind: ferry.noop, concurrency: 1}\n  - {name: x, queue: q, rate: 1/s}\n": `limits[1] (name "x"): name: already used by limits[0]`,
		"limits:\n  - {kind: ferry.noop, concurrency: 1, rates: 1/s}\n":                                  `line 2: unknown key rates`,
	} {
		_, err := Parse([]byte(doc), registry(t))
		require.Error(t, err, doc)
		assert.Equal(t, want, err.Error(), doc)
	}
}
