package ferrycli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/jobs"
)

func enqueueJobs() *cli.Command {
	return &cli.Command{
		Name:  "jobs",
		Usage: "list, inspect, retry, cancel, rescue and delete jobs",
		Description: `Works on River's river_job table through River's client, as a worker would.
Dead letters (jobs that failed for good) have their own commands: see
enqueue dead --help.

Examples:
   enqueue jobs list --state retryable --since 2h
   enqueue jobs get 1042
   enqueue jobs retry 1042 1043
   enqueue jobs cancel 1042
   enqueue jobs rescue 1042
   enqueue jobs delete 1042 --json`,
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list jobs, newest first",
				Description: `Filters combine with AND; a filter given several times matches any of its
values (--state retryable --state discarded). --since takes an RFC 3339 time
or a duration back from now, and compares with the job's creation time.

States: ` + strings.Join(jobStateNames()[:4], ", ") + `,
` + strings.Join(jobStateNames()[4:], ", ") + `.

Examples:
   enqueue jobs list
   enqueue jobs list --state retryable --kind http.request --since 2h
   enqueue jobs list --queue reports --tag nightly --limit 500 --json`,
				Flags:  jobListFlags(true),
				Action: func(c *cli.Context) error { return runJobsList(c, false) },
			},
			{
				Name:      "get",
				Usage:     "show one job: fields, args, and errors by attempt",
				ArgsUsage: "ID",
				Description: `Examples:
   enqueue jobs get 1042
   enqueue jobs get 1042 --json | jq '.errors[-1].error'`,
				Flags:  []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action: runJobsGet,
			},
			{
				Name:      "retry",
				Usage:     "make jobs available to run now (River's JobRetry)",
				ArgsUsage: "ID…",
				Description: `A retried job keeps its errors and attempt count; if it had used all its
attempts it gets one more. A running job is left alone (reported as failed,
naming its worker; when that worker is dead, enqueue jobs rescue takes the
job back). Each id is reported; the exit code is 1 if any could not be
retried.

Examples:
   enqueue jobs retry 1042
   enqueue jobs retry 1042 1043 1044 --json`,
				Flags:  []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action: func(c *cli.Context) error { return runJobsAction(c, actionRetry) },
			},
			{
				Name:      "cancel",
				Usage:     "cancel jobs (River's JobCancel)",
				ArgsUsage: "ID…",
				Description: `A queued job is cancelled at once. For a running job the cancellation is
requested: its worker must see the request (its context is cancelled), and
the job ends cancelled unless it completes first; it is reported as "cancel
requested", still running. When that worker is dead (its liveness lock is
free: see enqueue workers), it will never see the request: the job is
reported as failed, and enqueue jobs rescue takes it back and cancels it. A
finished job (completed, discarded) is left alone and reported as failed.
Each id is reported; the exit code is 1 if any could not be cancelled.

Examples:
   enqueue jobs cancel 1042
   enqueue jobs cancel 1042 1043 --json`,
				Flags:  []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action: func(c *cli.Context) error { return runJobsAction(c, actionCancel) },
			},
			{
				Name:      "rescue",
				Usage:     "take back running jobs whose worker is dead, now, as the leader's rescuer would",
				ArgsUsage: "ID…",
				Description: `The leader's rescuer takes back the running jobs of a dead worker within
FERRY_RESCUE_INTERVAL (a second); this does it now, with no leader at all.
A job running on a live worker is left alone (reported as failed): it
would run twice. When the job's worker is dead, the worker is declared
dead and all its running jobs are taken back: available again with the
attempt counted, or discarded when out of attempts, or as poison at the
FERRY_MAX_ORPHANED-th death. A job last attempted by a River client that
is not a ferry worker is taken back alone. A running job whose
cancellation was requested (enqueue jobs cancel) is cancelled, not made
available. A dead worker that led River has that leadership resigned
too, and the result says so. Each id is reported; the exit code is 1 if
any was not rescued.

Examples:
   enqueue jobs rescue 1042
   enqueue jobs rescue 1042 1043 --json`,
				Flags: []cli.Flag{databaseURLFlag(), jsonFlag(),
					&cli.IntFlag{Name: "max-orphaned", Value: liveness.DefaultMaxOrphaned, Usage: "deaths of its worker after which a job is discarded as poison", EnvVars: []string{"FERRY_MAX_ORPHANED"}}},
				Action: func(c *cli.Context) error { return runJobsAction(c, actionRescue(c.Int("max-orphaned"))) },
			},
			{
				Name:      "delete",
				Usage:     "delete jobs (River's JobDelete); running jobs cannot be deleted",
				ArgsUsage: "ID…",
				Description: `Each id is reported; the exit code is 1 if any could not be deleted (not
found, or running: cancel it first).

Examples:
   enqueue jobs delete 1042
   enqueue jobs delete 1042 1043 --json`,
				Flags:  []cli.Flag{databaseURLFlag(), jsonFlag()},
				Action: func(c *cli.Context) error { return runJobsAction(c, actionDelete) },
			},
		},
	}
}

// Ferry's own SQL on river_job, for what River's client has no call for.
const (
	// sqlDeadLetter is the predicate of a dead letter: a job that will not
	// run again because it failed. Either discarded (its last attempt
	// failed), or cancelled by a failure: its worker returned
	// river.JobCancel (http.request on a 4xx, say), River recorded that
	// attempt's error, and nobody asked for the cancellation. A person's
	// cancel (River's JobCancel: enqueue jobs cancel, River UI, Go) stamps
	// metadata.cancel_attempted_at, and River's JobRetry removes it: a job
	// cancelled by a person is never a dead letter.
	sqlDeadLetter = `(state = 'discarded' OR (state = 'cancelled'
		AND metadata->'cancel_attempted_at' IS NULL AND coalesce(cardinality(errors), 0) > 0))`

	// sqlDeadStates reads the state of the given jobs, and whether each is
	// a dead letter.
	sqlDeadStates = `SELECT id, state::text, ` + sqlDeadLetter + ` FROM river_job WHERE id = any($1::bigint[])`

	// sqlDeadIDs lists the dead letters matching optional kinds and queues.
	sqlDeadIDs = `
		SELECT id FROM river_job
		WHERE ` + sqlDeadLetter + `
		  AND (cardinality($1::text[]) = 0 OR kind = any($1::text[]))
		  AND (cardinality($2::text[]) = 0 OR queue = any($2::text[]))
		ORDER BY id`

	// sqlLockDead locks the given jobs that are still dead letters.
	sqlLockDead = `
		SELECT id FROM river_job
		WHERE id = any($1::bigint[]) AND ` + sqlDeadLetter + `
		ORDER BY id
		FOR UPDATE`
)

func jobStateNames() []string {
	var names []string
	for _, s := range rivertype.JobStates() {
		names = append(names, string(s))
	}
	slices.Sort(names)
	return names
}

// jobListFlags are the filters of jobs list (withState) and dead list.
func jobListFlags(withState bool) []cli.Flag {
	flags := []cli.Flag{databaseURLFlag()}
	if withState {
		flags = append(flags, &cli.StringSliceFlag{Name: "state", Usage: "only jobs in this state (repeatable)"})
	}
	return append(flags,
		&cli.StringSliceFlag{Name: "kind", Usage: "only jobs of this kind (repeatable)"},
		&cli.StringSliceFlag{Name: "queue", Usage: "only jobs in this queue (repeatable)"},
		&cli.StringSliceFlag{Name: "tag", Usage: "only jobs with this tag (repeatable: any of them)"},
		&cli.StringFlag{Name: "since", Usage: "only jobs created since this time (RFC 3339) or this long ago (2h, 30m)"},
		&cli.IntFlag{Name: "limit", Value: 50, Usage: "at most this many jobs (1 to 10000)"},
		jsonFlag(),
	)
}

// jobFilter is the parsed filters of a list.
type jobFilter struct {
	states []rivertype.JobState
	kinds  []string
	queues []string
	tags   []string
	since  time.Time
	limit  int
}

// jobFilterFrom reads the list flags; states, when given, replace --state.
func jobFilterFrom(c *cli.Context, states []rivertype.JobState) (jobFilter, error) {
	f := jobFilter{states: states, kinds: c.StringSlice("kind"), queues: c.StringSlice("queue"), tags: c.StringSlice("tag"), limit: c.Int("limit")}
	if states == nil {
		for _, s := range c.StringSlice("state") {
			st := rivertype.JobState(s)
			if !slices.Contains(rivertype.JobStates(), st) {
				return f, usageErrorf("--state %q: want one of %s", s, strings.Join(jobStateNames(), ", "))
			}
			f.states = append(f.states, st)
		}
	}
	for _, q := range f.queues {
		if err := jobs.ValidateQueueName(q); err != nil {
			return f, usageErrorf("--queue: %v", err)
		}
	}
	for _, k := range f.kinds {
		if strings.TrimSpace(k) == "" {
			return f, usageErrorf("--kind is empty")
		}
	}
	for _, tag := range f.tags {
		if strings.TrimSpace(tag) == "" {
			return f, usageErrorf("--tag is empty")
		}
	}
	if s := c.String("since"); s != "" {
		t, err := parseSince(s, time.Now())
		if err != nil {
			return f, err
		}
		f.since = t
	}
	if f.limit < 1 || f.limit > 10000 {
		return f, usageErrorf("--limit %d: must be 1 to 10000", f.limit)
	}
	return f, nil
}

// parseSince reads an RFC 3339 time or a positive duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, usageErrorf("--since %q: not an RFC 3339 time like 2026-12-01T06:00:00Z or a duration like 2h", s)
	}
	return now.Add(-d), nil
}

func (f jobFilter) params() *river.JobListParams {
	p := river.NewJobListParams().First(f.limit).OrderBy(river.JobListOrderByID, river.SortOrderDesc)
	if len(f.states) > 0 {
		p = p.States(f.states...)
	}
	if len(f.kinds) > 0 {
		p = p.Kinds(f.kinds...)
	}
	if len(f.queues) > 0 {
		p = p.Queues(f.queues...)
	}
	if len(f.tags) > 0 {
		p = p.TagsAny(f.tags...)
	}
	if !f.since.IsZero() {
		p = p.Where("created_at >= @since", river.NamedArgs{"since": f.since})
	}
	return p
}

// jobView is a job as the jobs and dead commands print it.
type jobView struct {
	ID          int64           `json:"id"`
	Kind        string          `json:"kind"`
	Queue       string          `json:"queue"`
	State       string          `json:"state"`
	Priority    int             `json:"priority"`
	Attempt     int             `json:"attempt"`
	MaxAttempts int             `json:"max_attempts"`
	Tags        []string        `json:"tags"`
	Args        json.RawMessage `json:"args"`
	Metadata    json.RawMessage `json:"metadata"`
	Errors      []jobError      `json:"errors"`
	CreatedAt   time.Time       `json:"created_at"`
	ScheduledAt time.Time       `json:"scheduled_at"`
	AttemptedAt *time.Time      `json:"attempted_at"`
	FinalizedAt *time.Time      `json:"finalized_at"`
}

// jobError is one failed attempt.
type jobError struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Trace   string    `json:"trace,omitempty"`
}

func viewJob(j *rivertype.JobRow) jobView {
	v := jobView{
		ID: j.ID, Kind: j.Kind, Queue: j.Queue, State: string(j.State), Priority: j.Priority,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Tags: j.Tags,
		Args: json.RawMessage(j.EncodedArgs), Metadata: json.RawMessage(j.Metadata),
		Errors:    make([]jobError, 0, len(j.Errors)),
		CreatedAt: j.CreatedAt, ScheduledAt: j.ScheduledAt, AttemptedAt: j.AttemptedAt, FinalizedAt: j.FinalizedAt,
	}
	if v.Tags == nil {
		v.Tags = []string{}
	}
	if len(v.Args) == 0 {
		v.Args = json.RawMessage("{}")
	}
	if len(v.Metadata) == 0 {
		v.Metadata = json.RawMessage("{}")
	}
	for _, e := range j.Errors {
		v.Errors = append(v.Errors, jobError{Attempt: e.Attempt, At: e.At, Error: e.Error, Trace: e.Trace})
	}
	return v
}

// withClient runs fn with an insert-only River client over a pool.
func withClient(c *cli.Context, fn func(context.Context, *pgxpool.Pool, *river.Client[pgx.Tx]) error) error {
	return withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
		ins, err := jobs.NewInserter(pool)
		if err != nil {
			return err
		}
		return fn(ctx, pool, ins.Client())
	})
}

// runJobsList lists jobs, or only the dead letters (dead list, which has
// no --state).
func runJobsList(c *cli.Context, dead bool) error {
	if c.NArg() > 0 {
		return usageErrorf("list takes no arguments, got %q", c.Args().First())
	}
	var states []rivertype.JobState
	if dead {
		states = []rivertype.JobState{rivertype.JobStateDiscarded, rivertype.JobStateCancelled}
	}
	f, err := jobFilterFrom(c, states)
	if err != nil {
		return err
	}
	params := f.params()
	if dead {
		params = params.Where(sqlDeadLetter)
	}
	var rows []*rivertype.JobRow
	err = withClient(c, func(ctx context.Context, _ *pgxpool.Pool, client *river.Client[pgx.Tx]) error {
		res, err := client.JobList(ctx, params)
		if err != nil {
			return fmt.Errorf("list jobs: %w", err)
		}
		rows = res.Jobs
		return nil
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		views := make([]jobView, 0, len(rows))
		for _, j := range rows {
			views = append(views, viewJob(j))
		}
		return out.JSON(views)
	}
	table := make([][]string, 0, len(rows))
	if dead { // dead letters: when and why
		for _, j := range rows {
			table = append(table, []string{strconv.FormatInt(j.ID, 10), j.Kind, j.Queue, string(j.State), attempts(j),
				fmtTimePtr(j.FinalizedAt), truncate(oneLineText(lastError(j)), 80)})
		}
		return out.Table([]string{"ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "FINALIZED", "LAST ERROR"}, table)
	}
	for _, j := range rows {
		table = append(table, []string{strconv.FormatInt(j.ID, 10), j.Kind, j.Queue, string(j.State), attempts(j),
			fmtTime(j.CreatedAt), fmtTime(j.ScheduledAt)})
	}
	return out.Table([]string{"ID", "KIND", "QUEUE", "STATE", "ATTEMPT", "CREATED", "SCHEDULED"}, table)
}

func attempts(j *rivertype.JobRow) string { return fmt.Sprintf("%d/%d", j.Attempt, j.MaxAttempts) }

func lastError(j *rivertype.JobRow) string {
	if len(j.Errors) == 0 {
		return ""
	}
	return j.Errors[len(j.Errors)-1].Error
}

func fmtTimePtr(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return fmtTime(*t)
}

// oneLineText folds a multi-line message onto one line for a table.
func oneLineText(s string) string { return strings.Join(strings.Fields(s), " ") }

// parseIDs reads job id arguments; any that is not a positive integer is bad
// input, and nothing is done.
func parseIDs(c *cli.Context, verb string) ([]int64, error) {
	if c.NArg() == 0 {
		return nil, usageErrorf("%s takes one or more job ID arguments", verb)
	}
	ids := make([]int64, 0, c.NArg())
	for _, a := range c.Args().Slice() {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, usageErrorf("%q is not a job id", a)
		}
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func runJobsGet(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageErrorf("get takes exactly one job ID argument, got %d", c.NArg())
	}
	ids, err := parseIDs(c, "get")
	if err != nil {
		return err
	}
	var j *rivertype.JobRow
	err = withClient(c, func(ctx context.Context, _ *pgxpool.Pool, client *river.Client[pgx.Tx]) (err error) {
		j, err = client.JobGet(ctx, ids[0])
		if errors.Is(err, rivertype.ErrNotFound) {
			return fmt.Errorf("job %d: not found", ids[0])
		}
		return err
	})
	if err != nil {
		return err
	}
	v := viewJob(j)
	out := outputFrom(c)
	if out.json {
		return out.JSON(v)
	}
	tags := strings.Join(v.Tags, ", ")
	if tags == "" {
		tags = "-"
	}
	if err := out.Table([]string{"FIELD", "VALUE"}, [][]string{
		{"id", strconv.FormatInt(v.ID, 10)},
		{"kind", v.Kind},
		{"queue", v.Queue},
		{"state", v.State},
		{"priority", strconv.Itoa(v.Priority)},
		{"attempt", fmt.Sprintf("%d of %d", v.Attempt, v.MaxAttempts)},
		{"tags", tags},
		{"created", fmtTime(v.CreatedAt)},
		{"scheduled", fmtTime(v.ScheduledAt)},
		{"attempted", fmtTimePtr(v.AttemptedAt)},
		{"finalized", fmtTimePtr(v.FinalizedAt)},
	}); err != nil {
		return err
	}
	args, err := json.MarshalIndent(v.Args, "", "  ")
	if err != nil {
		args = v.Args
	}
	fmt.Fprintf(out.w, "\nargs:\n%s\n", args)
	if len(v.Errors) == 0 {
		_, err = fmt.Fprintln(out.w, "\nerrors: none")
		return err
	}
	fmt.Fprintln(out.w, "\nerrors:")
	rows := make([][]string, 0, len(v.Errors))
	for _, e := range v.Errors {
		rows = append(rows, []string{strconv.Itoa(e.Attempt), fmtTime(e.At), oneLineText(e.Error)})
	}
	return out.Table([]string{"ATTEMPT", "AT", "ERROR"}, rows)
}

// jobAction is retry, cancel, rescue or delete of one job.
type jobAction struct {
	verb, done string
	do         func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx], id int64) (*rivertype.JobRow, error)
	// outcome says what a call that returned a row did: a note to print
	// instead of done, or why it did nothing (failure; "" when it did what
	// was asked). w is the job's worker when the row is running.
	outcome func(j *rivertype.JobRow, w runningWorker) (note, failure string)
}

// runningWorker is the worker of a running job, as internal/liveness sees
// it: alive while its liveness lock is held.
type runningWorker struct {
	clientID string // River client id of the job's latest attempt; "" when the job is not running
	state    string // liveness.StateAlive, StateLost …; "" for a River client that is not a ferry worker
}

// gone reports whether the worker will never act on the job again.
func (w runningWorker) gone() bool {
	switch w.state {
	case liveness.StateLost, liveness.StateDead, liveness.StateStopped:
		return true
	}
	return false
}

func (w runningWorker) String() string {
	switch {
	case w.clientID == "":
		return "its worker"
	case w.state == "":
		return "River client " + w.clientID
	}
	return w.state + " worker " + w.clientID
}

func noOutcome(*rivertype.JobRow, runningWorker) (string, string) { return "", "" }

var (
	actionRetry = jobAction{
		verb: "retry", done: "retried",
		do: func(ctx context.Context, _ *pgxpool.Pool, c *river.Client[pgx.Tx], id int64) (*rivertype.JobRow, error) {
			return c.JobRetry(ctx, id)
		},
		outcome: func(j *rivertype.JobRow, w runningWorker) (string, string) {
			switch {
			case j.State != rivertype.JobStateRunning:
				return "", ""
			case w.gone():
				return "", fmt.Sprintf("running on %s, which will never finish it: not retried; take it back with `enqueue jobs rescue %d`", w, j.ID)
			}
			return "", fmt.Sprintf("running on %s: not retried", w)
		},
	}
	actionCancel = jobAction{
		verb: "cancel", done: "cancelled",
		do: func(ctx context.Context, _ *pgxpool.Pool, c *river.Client[pgx.Tx], id int64) (*rivertype.JobRow, error) {
			return c.JobCancel(ctx, id)
		},
		outcome: func(j *rivertype.JobRow, w runningWorker) (string, string) {
			switch {
			case j.State == rivertype.JobStateCompleted, j.State == rivertype.JobStateDiscarded:
				return "", "already " + string(j.State) + ": not cancelled"
			case j.State != rivertype.JobStateRunning:
				return "", ""
			case w.gone():
				return "", fmt.Sprintf("cancel requested, but the job runs on %s, which will never see it: `enqueue jobs rescue %d` takes it back and cancels it", w, j.ID)
			}
			return fmt.Sprintf("cancel requested: still running until %s sees it, then cancelled unless it completes first", w), ""
		},
	}
	actionDelete = jobAction{
		verb: "delete", done: "deleted",
		do: func(ctx context.Context, _ *pgxpool.Pool, c *river.Client[pgx.Tx], id int64) (*rivertype.JobRow, error) {
			return c.JobDelete(ctx, id)
		},
		outcome: noOutcome,
	}
)

// actionRescue takes back running jobs of dead workers (internal/liveness).
// A rescue that resigned the dead worker's River leadership says so.
func actionRescue(maxOrphaned int) jobAction {
	resigned := map[int64]bool{} // by job id
	return jobAction{
		verb: "rescue", done: "rescued",
		do: func(ctx context.Context, pool *pgxpool.Pool, c *river.Client[pgx.Tx], id int64) (*rivertype.JobRow, error) {
			res, err := liveness.RescueJob(ctx, pool, id, maxOrphaned)
			switch {
			case errors.Is(err, liveness.ErrJobNotFound):
				return nil, rivertype.ErrNotFound
			case err != nil:
				return nil, err
			}
			resigned[id] = res.RiverLeader
			return c.JobGet(ctx, id)
		},
		outcome: func(j *rivertype.JobRow, _ runningWorker) (string, string) {
			if resigned[j.ID] {
				return fmt.Sprintf("rescued (%s); its dead worker's River leadership resigned: another River client leads at once", j.State), ""
			}
			return "", ""
		},
	}
}

// actionResult is the outcome for one id.
type actionResult struct {
	ID    int64  `json:"id"`
	OK    bool   `json:"ok"`
	State string `json:"state,omitempty"` // after the action; "" when deleted or not found
	Note  string `json:"note,omitempty"`  // what happened, when done alone would mislead (a cancel requested)
	Error string `json:"error,omitempty"`
}

func runJobsAction(c *cli.Context, a jobAction) error {
	ids, err := parseIDs(c, a.verb)
	if err != nil {
		return err
	}
	results := make([]actionResult, 0, len(ids))
	var full error // the first refusal by a full queue: the command exits 3
	err = withClient(c, func(ctx context.Context, pool *pgxpool.Pool, client *river.Client[pgx.Tx]) error {
		for _, id := range ids {
			j, err := a.do(ctx, pool, client, id)
			var w runningWorker
			if (err == nil && j != nil && j.State == rivertype.JobStateRunning) || errors.Is(err, rivertype.ErrJobRunning) {
				var werr error
				if w.clientID, w.state, werr = liveness.RunningOn(ctx, pool, id); werr != nil {
					return werr
				}
			}
			r := actionResult{ID: id}
			switch {
			case errors.Is(err, rivertype.ErrNotFound):
				r.Error = "not found"
			case errors.Is(err, rivertype.ErrJobRunning) && w.gone():
				r.Error = fmt.Sprintf("running on %s, which will never finish it: take it back with `enqueue jobs rescue %d` first", w, id)
			case errors.Is(err, rivertype.ErrJobRunning):
				r.Error = fmt.Sprintf("running on %s: cancel it first", w)
			case errors.Is(err, liveness.ErrJobNotRunning), errors.As(err, new(*liveness.WorkerAliveError)):
				r.Error = err.Error()
			case err != nil:
				if ctx.Err() != nil || schemaError(err) != nil {
					return err
				}
				if qf := jobs.AsQueueFull(err); errors.Is(qf, jobs.ErrQueueFull) {
					err = qf
					if full == nil {
						full = qf
					}
				}
				r.Error = err.Error()
			default:
				if a.verb != "delete" {
					r.State = string(j.State)
				}
				r.Note, r.Error = a.outcome(j, w)
				r.OK = r.Error == ""
			}
			results = append(results, r)
		}
		return nil
	})
	if err != nil {
		return err
	}
	out := outputFrom(c)
	if out.json {
		err = out.JSON(results)
	} else {
		rows := make([][]string, 0, len(results))
		for _, r := range results {
			res := a.done
			if r.State != "" && r.State != a.done {
				// retried (available); not cancelled (cancelled)
				res += " (" + r.State + ")"
			}
			if r.Note != "" {
				res = r.Note
			}
			if !r.OK {
				res = "failed: " + r.Error
			}
			rows = append(rows, []string{strconv.FormatInt(r.ID, 10), res})
		}
		err = out.Table([]string{"ID", "RESULT"}, rows)
	}
	if err != nil {
		return err
	}
	failed := 0
	for _, r := range results {
		if !r.OK {
			failed++
		}
	}
	if failed > 0 && full != nil {
		return fmt.Errorf("%d of %d jobs not %s: %w", failed, len(results), a.done, full)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d jobs not %s", failed, len(results), a.done)
	}
	return nil
}
