package e2e_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

const (
	// repoRoot is the repository's root, seen from this package's directory.
	repoRoot = "../.."
	// tourHeading opens the README's tour; its first sh block is the tour.
	tourHeading = "## A five-minute tour"
	// taskEnqueue is how the tour runs the CLI; the Taskfile's enqueue
	// task runs taskEnqueueCmd with the arguments after "--".
	taskEnqueue    = "go tool task enqueue -- "
	taskEnqueueCmd = "./bin/enqueue {{.CLI_ARGS}}"
	// tourAdmin is where `go tool task up` serves the console; the test's
	// worker listens on a free port, which the commands are given instead.
	tourAdmin = "127.0.0.1:9090"
	// tourWait bounds how long what a command says takes to hold: a job to
	// complete, a delivery to arrive, the first tick (every 10 s) to come.
	tourWait = 20 * time.Second
)

// tourRun is the tour in progress: the processes `go tool task up` starts
// and what earlier commands printed.
type tourRun struct {
	worker, receiver *proctest.Proc
	jobID, msgID     string
}

// tourStep is what the test knows of one command of the tour: what its
// comment in the README must say, and the check that what it says holds.
// A check that fails is tried again, the command run again, until tourWait
// when retry is set (the command only reads).
type tourStep struct {
	says  []string
	retry bool
	check func(t *testing.T, r *tourRun, stdout string) error
}

// tourSteps are the tour's commands, as the README writes them. The tour
// and this table must match: a command the README adds needs its check.
var tourSteps = map[string]tourStep{
	`go tool task enqueue -- job ferry.noop`: {
		says: []string{"prints the job id", "job: completed"},
		check: func(t *testing.T, r *tourRun, stdout string) error {
			r.jobID = printedID(t, stdout)
			_, err := r.worker.WaitForLineFunc(tourWait, logtest.Logged("job: completed", "kind", "ferry.noop", "job_id", r.jobID))
			return err
		},
	},
	`go tool task enqueue -- jobs list --kind ferry.noop`: {
		says:  []string{"completed"},
		retry: true,
		check: func(t *testing.T, r *tourRun, stdout string) error {
			return matches(stdout, `(?m)^`+r.jobID+`\s+ferry\.noop\s+default\s+completed\s`)
		},
	},
	`go tool task enqueue -- schedule list`: {
		says: []string{"demo-heartbeat", "every 10s", "periodic: tick enqueued"},
		check: func(t *testing.T, r *tourRun, stdout string) error {
			if err := matches(stdout, `(?m)^demo-heartbeat\s+Demo heartbeat\s+every 10s\s`); err != nil {
				return err
			}
			_, err := r.worker.WaitForLineFunc(tourWait, logtest.Logged("periodic: tick enqueued", "schedule", "demo-heartbeat"))
			return err
		},
	},
	`go tool task enqueue -- outbox add demo.ping --payload '{"hello":1}'`: {
		says: []string{"prints the message id", "demo receiver: received"},
		check: func(t *testing.T, r *tourRun, stdout string) error {
			r.msgID = printedID(t, stdout)
			_, err := r.receiver.WaitForLine(tourWait, `msg="demo receiver: received" event_id=`+r.msgID+` topic=demo.ping`)
			return err
		},
	},
	`go tool task enqueue -- outbox stats`: {
		says:  []string{"demo.ping delivered to the demo-receiver route"},
		retry: true,
		check: func(t *testing.T, r *tourRun, stdout string) error {
			return matches(stdout, `(?m)^demo\.ping\s+demo-receiver\s+delivered\s+1$`)
		},
	},
	`curl -s 127.0.0.1:9090/healthz`: {
		says: []string{"ok"},
		check: func(t *testing.T, r *tourRun, stdout string) error {
			return matches(stdout, `^ok\n?$`)
		},
	},
	`curl -s 127.0.0.1:9090/admin/api/summary`: {
		says:  []string{"summary as JSON", "this worker leads"},
		retry: true,
		check: func(t *testing.T, r *tourRun, stdout string) error {
			var summary struct {
				Replica struct {
					Role string `json:"role"`
				} `json:"replica"`
			}
			if err := json.Unmarshal([]byte(stdout), &summary); err != nil {
				return err
			}
			if summary.Replica.Role != "leader" {
				return fmt.Errorf("the replica that answered is %q, not the leader", summary.Replica.Role)
			}
			return nil
		},
	},
	`curl -s 127.0.0.1:9090/metrics | grep ferry_jobs`: {
		says: []string{"jobs by queue and state"},
		check: func(t *testing.T, r *tourRun, stdout string) error {
			return matches(stdout, `(?m)^ferry_jobs\{queue="default",state="completed"\} [1-9]`)
		},
	},
}

// TestTour runs the README's five-minute tour as a new user does: what `go
// tool task up` starts (read from Taskfile.yml), then each command of the
// tour, as written, in a shell, checking what its comment says it prints
// or does. It fails when the tour's commands stop working.
func TestTour(t *testing.T) {
	t.Parallel()
	commands := tourCommands(t)
	up := taskUp(t)
	b := proctest.Build(t, "./cmd/worker", "./cmd/enqueue", "./examples/receiver")
	url := pgtest.NewDatabase(t, false) // empty: `go tool task up` migrates

	// go tool task up: migrate, then the demo receiver and the worker with
	// the task's environment. The receiver listens on a free port, which
	// the demo config's route is pointed at; the worker logs JSON, which
	// the checks read, and its console takes a free port too.
	_, stderr, code := proctest.Run(t, b["./cmd/worker"], env(url), nil, "migrate", "up")
	require.Zero(t, code, "worker migrate up: %s", stderr)
	receiverAddr := freeAddr(t)
	demo, err := os.ReadFile(filepath.Join(repoRoot, up["FERRY_CONFIG"]))
	require.NoError(t, err)
	require.Contains(t, string(demo), "http://127.0.0.1:8089/", "the demo config routes to the demo receiver's default address")
	config := filepath.Join(t.TempDir(), "demo.yaml")
	require.NoError(t, os.WriteFile(config, []byte(strings.ReplaceAll(string(demo), "127.0.0.1:8089", receiverAddr)), 0o600))

	var upEnv []string
	for k, v := range up {
		upEnv = append(upEnv, k+"="+v)
	}
	r := &tourRun{
		receiver: proctest.Start(t, b["./examples/receiver"], append(upEnv, "DEMO_RECEIVER_ADDR="+receiverAddr)),
	}
	_, err = r.receiver.WaitForLine(startTimeout, "demo receiver: listening")
	require.NoError(t, err)
	r.worker = proctest.Start(t, b["./cmd/worker"], env(url, append(upEnv,
		"FERRY_CONFIG="+config, "FERRY_LOG_FORMAT=json", "FERRY_ADMIN_ADDR=127.0.0.1:0")...), "run")
	_, err = r.worker.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)
	admin := adminAddr(t, r.worker)

	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	shellEnv := []string{"DATABASE_URL=" + url, "TOUR_ENQUEUE=" + b["./cmd/enqueue"]}
	seen := map[string]bool{}
	for _, c := range commands {
		step, ok := tourSteps[c.command]
		require.True(t, ok, "the tour runs %q, which this test does not check: add it to tourSteps", c.command)
		seen[c.command] = true
		for _, s := range step.says {
			require.Contains(t, c.comment, s, "the tour's %q no longer says %q: change tourSteps with it", c.command, s)
		}
		line := strings.ReplaceAll(c.command, tourAdmin, admin)
		if rest, ok := strings.CutPrefix(line, taskEnqueue); ok {
			line = `"$TOUR_ENQUEUE" ` + rest
		}
		deadline := time.Now().Add(tourWait)
		for {
			stdout, stderr, code := proctest.Run(t, bash, shellEnv, nil, "-c", line)
			require.Zero(t, code, "%s: %s", c.command, stderr)
			err := step.check(t, r, stdout)
			if err == nil {
				break
			}
			require.True(t, step.retry && time.Now().Before(deadline), "%s (%s): %v; it printed:\n%s", c.command, c.comment, err, stdout)
			time.Sleep(pollEvery * 4)
		}
	}
	for command := range tourSteps {
		require.True(t, seen[command], "the tour no longer runs %q: remove it from tourSteps", command)
	}
	stop(t, r.worker, stopTimeout)
}

// tourCommand is one line of the tour: the command and its comment.
type tourCommand struct{ command, comment string }

// tourCommands reads the README's tour: the lines of the first sh block
// after tourHeading, each a command and a comment saying what it does.
func tourCommands(t *testing.T) []tourCommand {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(readme), "\n"+tourHeading+"\n")
	require.True(t, ok, "the README has no %q", tourHeading)
	_, block, ok := strings.Cut(after, "```sh\n")
	require.True(t, ok, "the README's tour has no sh block")
	block, _, ok = strings.Cut(block, "\n```")
	require.True(t, ok, "the README's tour's sh block does not end")
	var commands []tourCommand
	for _, line := range strings.Split(block, "\n") {
		command, comment, _ := strings.Cut(line, " # ")
		if command = strings.TrimSpace(command); command == "" || strings.HasPrefix(command, "#") {
			continue
		}
		commands = append(commands, tourCommand{command, strings.TrimSpace(comment)})
	}
	require.NotEmpty(t, commands)
	return commands
}

// taskUp reads what `go tool task up` runs from Taskfile.yml: it requires
// the task's commands to be the ones the test plays (migrate, then the demo
// receiver beside the worker), the enqueue task to run bin/enqueue, and
// returns the up task's environment at its defaults.
func taskUp(t *testing.T) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "Taskfile.yml"))
	require.NoError(t, err)
	var taskfile struct {
		Tasks map[string]struct {
			Env  map[string]string `yaml:"env"`
			Cmds []any             `yaml:"cmds"`
		} `yaml:"tasks"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &taskfile))
	require.Equal(t, []any{taskEnqueueCmd}, taskfile.Tasks["enqueue"].Cmds, "the enqueue task runs bin/enqueue with the arguments")
	up := taskfile.Tasks["up"]
	var cmds []string
	for _, c := range up.Cmds {
		if s, ok := c.(string); ok && !strings.HasPrefix(s, "echo ") {
			cmds = append(cmds, s)
		}
	}
	require.Equal(t, []string{"./bin/worker migrate up", `bash -c './bin/demo-receiver & trap "kill $!" EXIT; ./bin/worker run'`}, cmds,
		"the up task's commands changed: play the new ones here")
	def := regexp.MustCompile(`^\{\{\.([A-Z_]+) \| default "([^"]*)"\}\}$`)
	env := map[string]string{}
	for k, v := range up.Env {
		m := def.FindStringSubmatch(v)
		require.NotNil(t, m, "the up task's %s is %q, not a default", k, v)
		require.Equal(t, k, m[1])
		env[k] = m[2]
	}
	require.Contains(t, env, "FERRY_CONFIG")
	return env
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// printedID requires stdout to be one id, and returns it.
func printedID(t *testing.T, stdout string) string {
	t.Helper()
	id := strings.TrimSpace(stdout)
	_, err := strconv.ParseInt(id, 10, 64)
	require.NoError(t, err, "want an id, got %q", stdout)
	return id
}

// matches says whether s matches the regular expression re.
func matches(s, re string) error {
	if !regexp.MustCompile(re).MatchString(s) {
		return fmt.Errorf("no match for %s", re)
	}
	return nil
}
