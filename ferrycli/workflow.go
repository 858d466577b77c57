package ferrycli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/urfave/cli/v2"
	"go.yaml.in/yaml/v3"

	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

// maxWorkflowFile is the largest workflow file `workflow add` reads.
const maxWorkflowFile = 64 << 20

func enqueueWorkflow() *cli.Command {
	return &cli.Command{
		Name:  "workflow",
		Usage: "add, list, show, cancel or retry workflows (DAGs of jobs)",
		Description: `A workflow is a DAG of steps, each a job of a known kind that waits for the
steps it depends on (package workflow). A step's job is pending while it
waits; the transaction that completes its last dependency makes it
available. A failed dependency cancels the steps downstream (unless a step
ignores failed dependencies); retry runs the failed steps again and
re-opens what they cancelled.

Examples:
   enqueue workflow add --file order.yaml
   enqueue workflow list --state running
   enqueue workflow show wf_018f3c… --json
   enqueue workflow cancel order-1234
   enqueue workflow retry order-1234 --step charge`,
		Subcommands: []*cli.Command{
			{
				Name:  "add",
				Usage: "insert a workflow from a JSON or YAML file",
				Description: `The file (or - for stdin) is one workflow, JSON or YAML:

   id: order-1234            # optional: a second add with this id adds nothing
   name: order 1234
   steps:
     - name: charge
       kind: http.request
       args: {url: "http://pay/charge"}
       queue: payments        # optional: the kind's queue
       priority: 1            # optional, 1 to 4
       max_attempts: 5        # optional
       tags: [order]          # optional
     - name: ship
       kind: http.request
       args: {url: "http://ship"}
       depends_on: [charge]
       ignore_failed_deps: false
       after_all_added_by: ""  # also wait for the steps this one adds at run time

Every kind must be built in or registered by a worker. The whole workflow is
checked first: a cycle, an unknown dependency, a duplicate step, an unknown
kind or a malformed field is refused with one line and nothing is written.
It prints the workflow's id.`,
				Flags: []cli.Flag{
					databaseURLFlag(),
					&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Usage: "the workflow, JSON or YAML (- for stdin); required"},
					jsonFlag(),
				},
				Action: runWorkflowAdd,
			},
			{
				Name:  "list",
				Usage: "list workflows, newest first, with their state and progress",
				Flags: []cli.Flag{
					databaseURLFlag(),
					&cli.StringFlag{Name: "state", Usage: "only workflows in this state: running, completed, failed or cancelled"},
					&cli.IntFlag{Name: "limit", Value: 100, Usage: "at most this many workflows"},
					jsonFlag(),
				},
				Action: runWorkflowList,
			},
			{
				Name:      "show",
				Usage:     "show a workflow and each step's state, attempts, dependencies and times",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action:    runWorkflowShow,
			},
			{
				Name:      "cancel",
				Usage:     "cancel a workflow: its steps not started are cancelled, its running ones asked to stop",
				ArgsUsage: "ID",
				Flags:     []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action:    runWorkflowCancel,
			},
			{
				Name:      "retry",
				Usage:     "run a workflow's failed steps again (or one of them), re-opening what they cancelled",
				ArgsUsage: "ID",
				Flags: []cli.Flag{
					databaseURLFlag(),
					&cli.StringFlag{Name: "step", Usage: "retry only this step"},
					jsonFlag(),
				},
				Action: runWorkflowRetry,
			},
		},
	}
}

// workflowFile is the file `workflow add` reads.
type workflowFile struct {
	ID    string             `yaml:"id" json:"id"`
	Name  string             `yaml:"name" json:"name"`
	Steps []workflowFileStep `yaml:"steps" json:"steps"`
}

type workflowFileStep struct {
	Name             string         `yaml:"name"`
	Kind             string         `yaml:"kind"`
	Args             map[string]any `yaml:"args"`
	Queue            string         `yaml:"queue"`
	Priority         int            `yaml:"priority"`
	MaxAttempts      int            `yaml:"max_attempts"`
	Tags             []string       `yaml:"tags"`
	DependsOn        []string       `yaml:"depends_on"`
	IgnoreFailedDeps bool           `yaml:"ignore_failed_deps"`
	AfterAllAddedBy  string         `yaml:"after_all_added_by"`
}

// parseWorkflowFile reads a workflow file: YAML, of which JSON is a part,
// with no key it does not know.
func parseWorkflowFile(b []byte) (*workflowFile, error) {
	var f workflowFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("the file is empty")
		}
		return nil, errors.New(strings.Join(strings.Fields(err.Error()), " "))
	}
	return &f, nil
}

// build makes the workflow, each step's args checked as `enqueue job`
// checks them and its kind looked up (its queue is the kind's unless the
// step names one).
func (f *workflowFile) build(ctx context.Context, pool *pgxpool.Pool) (*workflow.Workflow, error) {
	wf := workflow.New(f.Name)
	wf.ID = f.ID
	kinds := map[string]jobs.Known{}
	for i, s := range f.Steps {
		where := fmt.Sprintf("step %d (%s)", i+1, s.Name)
		if s.Kind == "" {
			return nil, usageErrorf("%s: no kind", where)
		}
		known, seen := kinds[s.Kind]
		if !seen {
			k, ok, err := jobs.Lookup(ctx, pool, s.Kind)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, usageErrorf("%s: unknown job kind %q: not built in and no worker has registered it", where, s.Kind)
			}
			known, kinds[s.Kind] = k, k
		}
		raw := []byte("{}")
		if s.Args != nil {
			var err error
			if raw, err = json.Marshal(s.Args); err != nil {
				return nil, usageErrorf("%s: args: %v", where, err)
			}
		}
		args, err := jobs.ParseRaw(s.Kind, raw)
		if err != nil {
			return nil, usageErrorf("%s: %v", where, err)
		}
		opts := &river.InsertOpts{Queue: s.Queue, Priority: s.Priority, MaxAttempts: s.MaxAttempts, Tags: s.Tags}
		if opts.Queue == "" {
			opts.Queue = known.Queue
		}
		if err := jobs.ValidateQueueName(opts.Queue); err != nil {
			return nil, usageErrorf("%s: queue: %v", where, err)
		}
		if s.Priority != 0 && (s.Priority < 1 || s.Priority > 4) {
			return nil, usageErrorf("%s: priority %d is not 1 to 4", where, s.Priority)
		}
		if s.MaxAttempts < 0 {
			return nil, usageErrorf("%s: max_attempts %d is negative", where, s.MaxAttempts)
		}
		for _, tag := range s.Tags {
			if !jobs.ValidTag(tag) {
				return nil, usageErrorf("%s: tag %q: 3 to 255 letters, digits, _ or -", where, tag)
			}
		}
		wf.AddStep(workflow.Step{Name: s.Name, Args: args, Opts: opts, DependsOn: s.DependsOn,
			IgnoreFailedDeps: s.IgnoreFailedDeps, AfterAllAddedBy: s.AfterAllAddedBy})
	}
	if err := wf.Validate(); err != nil {
		return nil, usageErrorf("%v", err)
	}
	return wf, nil
}

type workflowAdded struct {
	ID       string `json:"id"`
	Existing bool   `json:"existing"`
	Steps    int    `json:"steps"`
}

func runWorkflowAdd(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("add takes no arguments, got %q", c.Args().First())
	}
	if c.String("file") == "" {
		return usageErrorf("add needs --file WF.yaml or WF.json (- for stdin)")
	}
	b, err := readDocument("file", fileArg(c.String("file")), c.App.Reader, maxWorkflowFile)
	if err != nil {
		return err
	}
	f, err := parseWorkflowFile(b)
	if err != nil {
		return usageErrorf("--file: %v", err)
	}
	var res *workflow.Result
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		wf, err := f.build(ctx, pool)
		if err != nil {
			return err
		}
		ins, err := jobs.NewInserter(pool)
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err = workflow.InsertTx(ctx, tx, ins, wf)
			return err
		})
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(workflowAdded{ID: res.ID, Existing: res.Existing, Steps: len(res.Jobs)})
	}
	if res.Existing {
		_, err = fmt.Fprintf(out.w, "workflow %s exists already (%d steps); nothing inserted\n", res.ID, len(res.Jobs))
		return err
	}
	_, err = fmt.Fprintln(out.w, res.ID)
	return err
}

// fileArg is a --file value as readDocument reads a document: "-" is
// stdin, anything else a path.
func fileArg(v string) string {
	if v == "-" {
		return v
	}
	return "@" + v
}

func runWorkflowList(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageErrorf("list takes no arguments, got %q", c.Args().First())
	}
	state := c.String("state")
	if state != "" && !slices.Contains(workflow.States, state) {
		return usageErrorf("--state %q: one of %s", state, strings.Join(workflow.States, ", "))
	}
	if c.Int("limit") < 1 {
		return usageErrorf("--limit %d: at least 1", c.Int("limit"))
	}
	list, out, printed, err := readList(c, func(ctx context.Context, pool *pgxpool.Pool) ([]workflow.Info, error) {
		return workflow.List(ctx, pool, workflow.ListParams{State: state, Limit: c.Int("limit")})
	})
	if err != nil || printed {
		return err
	}
	rows := make([][]string, 0, len(list))
	for _, w := range list {
		rows = append(rows, []string{w.ID, w.Name, w.State, progressText(w.Progress), w.CreatedAt.UTC().Format(time.RFC3339), optTime(w.FinishedAt)})
	}
	return out.Table([]string{"ID", "NAME", "STATE", "PROGRESS", "CREATED", "FINISHED"}, rows)
}

func progressText(p workflow.Progress) string {
	s := fmt.Sprintf("%d/%d", p.Finished, p.Steps)
	if p.Failed > 0 || p.Skipped > 0 {
		s += fmt.Sprintf(" (%d failed, %d skipped)", p.Failed, p.Skipped)
	}
	return s
}

func optTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func oneID(c *cli.Context, verb string) (string, error) {
	switch c.NArg() {
	case 0:
		return "", usageErrorf("%s which workflow? give its id", verb)
	case 1:
		return c.Args().First(), nil
	default:
		return "", usageErrorf("%s takes one workflow id, got %d arguments", verb, c.NArg())
	}
}

func runWorkflowShow(c *cli.Context) error {
	id, err := oneID(c, "show")
	if err != nil {
		return err
	}
	var in *workflow.Info
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		in, err = workflow.Get(ctx, pool, id)
		return err
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(in)
	}
	if _, err := fmt.Fprintf(out.w, "workflow %s (%s): %s, %s steps finished; created %s, finished %s\n",
		in.ID, in.Name, in.State, progressText(in.Progress), in.CreatedAt.UTC().Format(time.RFC3339), optTime(in.FinishedAt)); err != nil {
		return err
	}
	rows := make([][]string, 0, len(in.Steps))
	for _, s := range in.Steps {
		state := s.State
		if s.CancelReason != "" {
			state += " (" + s.CancelReason + ")"
		}
		deps := strings.Join(s.DependsOn, ",")
		if deps == "" {
			deps = "-"
		}
		rows = append(rows, []string{s.Name, strconv.FormatInt(s.JobID, 10), s.Kind, state,
			fmt.Sprintf("%d/%d", s.Attempt, s.MaxAttempts), deps, optTime(s.AttemptedAt), optTime(s.FinalizedAt), s.Error})
	}
	return out.Table([]string{"STEP", "JOB", "KIND", "STATE", "ATTEMPTS", "DEPENDS ON", "STARTED", "FINISHED", "LAST ERROR"}, rows)
}

func runWorkflowCancel(c *cli.Context) error {
	id, err := oneID(c, "cancel")
	if err != nil {
		return err
	}
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return workflow.CancelTx(ctx, tx, id) })
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(map[string]any{"id": id, "state": "cancelled"})
	}
	_, err = fmt.Fprintf(out.w, "workflow %s cancelled\n", id)
	return err
}

func runWorkflowRetry(c *cli.Context) error {
	id, err := oneID(c, "retry")
	if err != nil {
		return err
	}
	var n int
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			n, err = workflow.RetryTx(ctx, tx, id, c.String("step"))
			return jobs.AsQueueFull(err)
		})
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(map[string]any{"id": id, "retried": n})
	}
	_, err = fmt.Fprintf(out.w, "workflow %s: %d %s retried\n", id, n, plural(n, "step", "steps"))
	return err
}
