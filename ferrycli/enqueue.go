package ferrycli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/jobs"
)

// EnqueueApp returns the `enqueue` app, the operator's CLI. It takes no
// options: besides ferry's built-in kinds, it accepts those that some
// worker, yours included, has registered in ferry_job_kind.
func EnqueueApp() *cli.App {
	app := newApp("enqueue", "insert and inspect ferry jobs from a shell")
	app.Description = `Every command reads DATABASE_URL (or --database-url), prints a table (or JSON
with --json), and exits 0 on success, 2 on bad input (one line saying why;
nothing written), 3 when an insert is refused because its queue is full
(nothing written), 1 on any other failure.

Examples:
   enqueue job ferry.noop
   enqueue job http.request --args '{"method":"POST","url":"http://app:8000/warm"}' --in 10m
   enqueue job http.request --args @request.json --unique-key warm-2026-11-30 --json
   echo '{"sleep":"2s"}' | enqueue job ferry.noop --args - --queue default --priority 2
   enqueue bulk --file jobs.jsonl
   enqueue jobs list --state retryable --since 2h
   enqueue jobs get 1042
   enqueue dead list --kind http.request
   enqueue dead retry --kind http.request --yes

Each command has its own manual: enqueue COMMAND --help (enqueue jobs list --help).`
	// --database-url before the command, too.
	app.Flags = []cli.Flag{globalDatabaseURLFlag()}
	app.Commands = []*cli.Command{enqueueJob(), enqueueBulk(), enqueueJobs(), enqueueDead(), enqueueOutbox(), enqueueSchedule(), enqueueLeader(), enqueueWorkers(), enqueueQueues(), enqueueLimits(), enqueueBroadcast(), enqueueLock(), enqueueWorkflow(), versionCommand()}
	return app
}

func enqueueJob() *cli.Command {
	return &cli.Command{
		Name:      "job",
		Usage:     "insert one job and print its id",
		ArgsUsage: "KIND",
		Description: `KIND is one of ferry's built-in kinds (ferry.noop, http.request) or a kind some
worker has registered (listed in ferry_job_kind). Args must be a JSON object of
at most 64 KiB; for built-in kinds they are checked against the kind's fields.

With --queue, a queue that no live worker works is accepted with a warning on
stderr: no River client has reported it in river_queue in the last 11 minutes
(River reports each worked queue at start and every 10 minutes, so a queue a
running worker works is never warned about; one whose last worker died is
warned about within 11 minutes).

With --unique-key, a second insert of the same kind and key returns the
existing job instead of a new one while that job is pending, scheduled,
available, running, retryable or completed (completed jobs are cleaned after
24h).

With --debounce KEY --debounce-window D, inserts of the same kind and key
collapse into one job: it runs D after the last of them, with the last one's
args (and, with --debounce-max-wait M, no later than M after the first). An
insert while the key's job runs schedules one run after it. A collapse prints
the job it went into.

Examples:
   enqueue job ferry.noop
   enqueue job http.request --args '{"url":"http://app:8000/internal/drain","method":"POST","timeout":"2m"}'
   enqueue job http.request --args @req.json --at 2026-12-01T06:00:00+01:00 --tag nightly
   enqueue job ferry.noop --args - < args.json
   enqueue job http.request --args @reindex.json --debounce reindex:shop-7 --debounce-window 30s --debounce-max-wait 5m`,
		Flags: []cli.Flag{
			databaseURLFlag(),
			&cli.StringFlag{Name: "args", Value: "{}", Usage: "job args: JSON, @file, or - for stdin"},
			&cli.StringFlag{Name: "queue", Usage: "queue (default: the kind's queue)"},
			&cli.IntFlag{Name: "priority", Value: 1, Usage: "1 (first) to 4 (last)"},
			&cli.StringFlag{Name: "at", Usage: "run at this time (RFC 3339)"},
			&cli.StringFlag{Name: "in", Usage: "run after this duration (e.g. 90s, 10m)"},
			&cli.IntFlag{Name: "max-attempts", Usage: "attempts before the job is discarded", DefaultText: "River's 25"},
			&cli.StringFlag{Name: "unique-key", Usage: "insert at most one live job of this kind with this key"},
			&cli.StringFlag{Name: "debounce", Usage: "debounce by this key: inserts of this kind and key collapse into one job (with --debounce-window)"},
			durationFlag("debounce-window", "the job runs this long after the last insert with its --debounce key", 0, ""),
			durationFlag("debounce-max-wait", "and no later than this after the first", 0, "no bound"),
			&cli.StringSliceFlag{Name: "tag", Usage: "tag the job (repeatable)"},
			jsonFlag(),
		},
		Action: runEnqueueJob,
	}
}

type jobResult struct {
	ID          int64     `json:"id"`
	Kind        string    `json:"kind"`
	Queue       string    `json:"queue"`
	State       string    `json:"state"`
	ScheduledAt time.Time `json:"scheduled_at"`
	Duplicate   bool      `json:"duplicate"`
}

func runEnqueueJob(c *cli.Context) error {
	// Everything that can be checked without the database is checked first.
	if c.NArg() != 1 {
		return usageErrorf("job takes exactly one KIND argument, got %d", c.NArg())
	}
	kind := c.Args().First()
	raw, err := readDocument("args", c.String("args"), c.App.Reader, jobs.MaxArgsBytes)
	if err != nil {
		return err
	}
	args, err := jobs.ParseRaw(kind, raw)
	if err != nil {
		return &UsageError{Err: fmt.Errorf("--args: %w", err)}
	}
	opts, err := insertOpts(c)
	if err != nil {
		return err
	}
	var (
		res    jobResult
		worked = true
	)
	err = withPool(c, func(ctx context.Context, pool *pgxpool.Pool) (err error) {
		if res, err = insertJob(ctx, pool, args, opts, c.String("unique-key"), debounceOf(c)); err != nil {
			return err
		}
		if c.IsSet("queue") {
			// The job is in; whether anything works its queue is advice.
			if err := pool.QueryRow(ctx, sqlQueueWorked, res.Queue).Scan(&worked); err != nil {
				warnf(c, "could not tell whether a worker works queue %q: %v", res.Queue, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !worked {
		warnf(c, "no live worker works queue %q (none has reported it in river_queue for %s): job %d waits until one does", res.Queue, queueReportWithin, res.ID)
	}
	out := outputFrom(c)
	if out.json {
		return out.JSON(res)
	}
	if res.Duplicate && c.IsSet("debounce") {
		_, err = fmt.Fprintf(out.w, "debounced into job %d (%s, %s, due %s)\n", res.ID, res.Kind, res.State, res.ScheduledAt.Format(time.RFC3339))
		return err
	}
	if res.Duplicate {
		_, err = fmt.Fprintf(out.w, "unique key matched existing job %d (%s, %s); nothing inserted\n", res.ID, res.Kind, res.State)
		return err
	}
	_, err = fmt.Fprintf(out.w, "%d\n", res.ID)
	return err
}

// queueReportWithin is how recently a River client must have reported a
// queue in river_queue for it to count as worked: River's producers report
// each of their queues at start and every 10 minutes (QueueReportInterval),
// so a queue a running worker works is never older than that, and one whose
// last worker died is noticed within this long.
const queueReportWithin = 11 * time.Minute

// sqlQueueWorked says whether some River client reported queue $1 within
// queueReportWithin.
var sqlQueueWorked = fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM river_queue
	WHERE name = $1 AND updated_at > now() - interval '%d seconds')`, int(queueReportWithin.Seconds()))

// insertJob checks the kind is known, fills the queue from it when unset,
// and inserts the job in one transaction.
func insertJob(ctx context.Context, pool *pgxpool.Pool, args jobs.RawArgs, opts *river.InsertOpts, uniqueKey string, deb *debounceFlags) (jobResult, error) {
	kind := args.Kind()
	known, ok, err := jobs.Lookup(ctx, pool, kind)
	if err != nil {
		return jobResult{}, err
	}
	if !ok {
		return jobResult{}, usageErrorf("unknown job kind %q: not built in and no worker has registered it", kind)
	}
	if opts.Queue == "" {
		opts.Queue = known.Queue
	}
	if uniqueKey != "" {
		opts = jobs.WithUniqueKey(opts, uniqueKey)
	}
	if deb != nil {
		opts = jobs.WithDebounce(opts, deb.key, deb.window, deb.maxWait)
	}
	ins, err := jobs.NewInserter(pool)
	if err != nil {
		return jobResult{}, err
	}
	var res jobResult
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		r, err := ins.InsertTx(ctx, tx, args, opts)
		if err != nil {
			return err
		}
		res = jobResult{ID: r.Job.ID, Kind: r.Job.Kind, Queue: r.Job.Queue, State: string(r.Job.State), ScheduledAt: r.Job.ScheduledAt, Duplicate: r.UniqueSkippedAsDuplicate}
		return nil
	})
	return res, err
}

// readDocument reads a JSON flag's value: inline, @file, or - for stdin,
// reading at most one byte past limit so an oversized document is refused,
// not loaded.
func readDocument(flag, v string, stdin io.Reader, limit int) ([]byte, error) {
	var (
		r    io.Reader
		from string
	)
	switch {
	case v == "-":
		r, from = stdin, "stdin"
	case strings.HasPrefix(v, "@"):
		f, err := os.Open(v[1:])
		if err != nil {
			return nil, usageErrorf("--%s: %v", flag, err)
		}
		defer f.Close()
		r, from = f, v[1:]
	default:
		return []byte(v), nil
	}
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, usageErrorf("--%s: read %s: %v", flag, from, err)
	}
	if len(b) > limit {
		// Only limit+1 bytes were read: the size is the file's, when it
		// has one.
		size := fmt.Sprintf("more than %d bytes", limit)
		if f, ok := r.(*os.File); ok {
			if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
				size = fmt.Sprintf("%d bytes", st.Size())
			}
		}
		return nil, usageErrorf("--%s: %s is %s, over the %d byte limit", flag, from, size, limit)
	}
	return b, nil
}

func insertOpts(c *cli.Context) (*river.InsertOpts, error) {
	opts := &river.InsertOpts{Queue: c.String("queue"), Priority: c.Int("priority"), MaxAttempts: c.Int("max-attempts")}
	if opts.Queue != "" {
		if err := jobs.ValidateQueueName(opts.Queue); err != nil {
			return nil, usageErrorf("--queue: %v", err)
		}
	}
	if opts.Priority < 1 || opts.Priority > 4 {
		return nil, usageErrorf("--priority %d: must be 1 (first) to 4 (last)", opts.Priority)
	}
	if c.IsSet("max-attempts") && opts.MaxAttempts < 1 {
		return nil, usageErrorf("--max-attempts %d: must be at least 1", opts.MaxAttempts)
	}
	at, in := c.String("at"), c.String("in")
	switch {
	case at != "" && in != "":
		return nil, usageErrorf("--at and --in: give one or the other")
	case at != "":
		t, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return nil, usageErrorf("--at %q: not an RFC 3339 time like 2026-12-01T06:00:00Z", at)
		}
		opts.ScheduledAt = t
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil || d < 0 {
			return nil, usageErrorf("--in %q: not a non-negative duration like 90s or 10m", in)
		}
		opts.ScheduledAt = time.Now().Add(d)
	}
	for _, tag := range c.StringSlice("tag") {
		if !jobs.ValidTag(tag) {
			return nil, usageErrorf("--tag %q: tags are 3 to 255 letters, digits, _ or -, starting and ending with a letter or digit", tag)
		}
		opts.Tags = append(opts.Tags, tag)
	}
	if key := c.String("unique-key"); c.IsSet("unique-key") && strings.TrimSpace(key) == "" {
		return nil, usageErrorf("--unique-key is empty")
	}
	if c.IsSet("debounce") || c.IsSet("debounce-window") || c.IsSet("debounce-max-wait") {
		switch {
		case !c.IsSet("debounce"):
			return nil, usageErrorf("--debounce-window and --debounce-max-wait need --debounce KEY")
		case !c.IsSet("debounce-window"):
			return nil, usageErrorf("--debounce needs --debounce-window (how long after the last insert the job runs)")
		case c.IsSet("unique-key"):
			return nil, usageErrorf("--debounce and --unique-key: give one or the other")
		case at != "" || in != "":
			return nil, usageErrorf("--debounce sets when the job runs: drop --at and --in")
		}
		if err := jobs.CheckDebounce(c.String("debounce"), c.Duration("debounce-window"), c.Duration("debounce-max-wait")); err != nil {
			return nil, usageErrorf("--debounce: %s", strings.TrimPrefix(err.Error(), "jobs: "))
		}
	}
	return opts, nil
}

// debounceFlags is job's --debounce, --debounce-window and
// --debounce-max-wait (checked by insertOpts).
type debounceFlags struct {
	key             string
	window, maxWait time.Duration
}

// debounceOf returns c's debounce, or nil without --debounce.
func debounceOf(c *cli.Context) *debounceFlags {
	if !c.IsSet("debounce") {
		return nil
	}
	return &debounceFlags{key: c.String("debounce"), window: c.Duration("debounce-window"), maxWait: c.Duration("debounce-max-wait")}
}
