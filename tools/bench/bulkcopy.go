package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/testkit/fleet"
)

// bulkCopyResult compares `enqueue bulk` with a plain COPY of the same
// rows, in one run.
type bulkCopyResult struct {
	Jobs   int `json:"bulk_copy_jobs"`
	Rounds int `json:"bulk_copy_rounds"`
	// CopyJobsPerSec is the reference: COPY river_job FROM STDIN, in
	// Postgres's text format, of the columns enqueue bulk fills, from a
	// buffer made before the clock starts (what psql's \copy does, with
	// nothing to read or check).
	CopyJobsPerSec  float64 `json:"bulk_copy_reference_jobs_per_sec"`
	FileJobsPerSec  float64 `json:"bulk_file_jobs_per_sec"`
	StdinJobsPerSec float64 `json:"bulk_stdin_jobs_per_sec"`
	// The ratios are the medians of each round's (bulk / COPY); the
	// rounds' own, in the order they ran, are beside them.
	FileRatio        float64   `json:"bulk_ratio_vs_copy"`
	StdinRatio       float64   `json:"bulk_stdin_ratio_vs_copy"`
	FileRatioRounds  []float64 `json:"bulk_ratio_vs_copy_rounds"`
	StdinRatioRounds []float64 `json:"bulk_stdin_ratio_vs_copy_rounds"`
	// Peak resident set of the enqueue process (VmHWM), the most of any
	// round.
	FilePeakRSSMB  float64 `json:"bulk_file_peak_rss_mb"`
	StdinPeakRSSMB float64 `json:"bulk_stdin_peak_rss_mb"`
}

// bulkVsCopy times, in paired rounds on one database (river_job emptied
// before each), a plain COPY of n ferry.noop rows, `enqueue bulk --file`
// of the same n lines, and the same lines piped to `enqueue bulk --file -`.
// The three take turns going first (turnOrder): in a fixed order the pipe
// always ran last, furthest from its round's COPY, and a checkpoint forced
// by the round's writes fell on it more often than on the others.
func bulkVsCopy(ctx context.Context, serverURL string, n, rounds int) (bulkCopyResult, error) {
	res := bulkCopyResult{Jobs: n, Rounds: rounds}
	dir, bin, err := buildIntoTemp("./cmd/enqueue")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "jobs.jsonl")
	if err := os.WriteFile(file, bytes.Repeat([]byte(`{"kind":"ferry.noop","args":{}}`+"\n"), n), 0o600); err != nil {
		return res, err
	}
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return res, err
	}
	defer drop()
	env := []string{"DATABASE_URL=" + pool.Config().ConnString()}

	const plain, fromFile, fromPipe = 0, 1, 2
	var copyRates, fileRates, stdinRates []float64
	var peak [3]float64 // each bulk leg's peak RSS over the rounds
	for round := range rounds {
		var rate [3]float64
		for _, leg := range turnOrder(3, round) {
			if leg == plain {
				if rate[leg], err = plainCopy(ctx, pool, n); err != nil {
					return res, fmt.Errorf("plain COPY: %w", err)
				}
				continue
			}
			var rss float64
			if rate[leg], rss, err = timeBulk(ctx, pool, bin, env, n, file, leg == fromPipe); err != nil {
				return res, err
			}
			peak[leg] = max(peak[leg], rss)
		}
		c, f, s := rate[plain], rate[fromFile], rate[fromPipe]
		copyRates, fileRates, stdinRates = append(copyRates, c), append(fileRates, f), append(stdinRates, s)
		res.FileRatioRounds, res.StdinRatioRounds = append(res.FileRatioRounds, f/c), append(res.StdinRatioRounds, s/c)
	}
	res.FilePeakRSSMB, res.StdinPeakRSSMB = peak[fromFile], peak[fromPipe]
	res.CopyJobsPerSec, res.FileJobsPerSec, res.StdinJobsPerSec = slices.Max(copyRates), slices.Max(fileRates), slices.Max(stdinRates)
	res.FileRatio, res.StdinRatio = pct(res.FileRatioRounds, 50), pct(res.StdinRatioRounds, 50)
	return res, nil
}

// emptyJobs empties river_job, so that each timed insert starts alike.
func emptyJobs(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, "TRUNCATE river_job")
	return err
}

// plainCopy is the reference: n rows as River's COPY writes them for a
// ferry.noop line, in COPY's text format.
func plainCopy(ctx context.Context, pool *pgxpool.Pool, n int) (float64, error) {
	if err := emptyJobs(ctx, pool); err != nil {
		return 0, err
	}
	now := time.Now().UTC().Format("2006-01-02 15:04:05.999999+00")
	row := fmt.Sprintf("{}\t%s\tferry.noop\t25\t{}\t1\tdefault\t%s\tavailable\t{}\n", now, now)
	data := strings.Repeat(row, n)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	start := time.Now()
	tag, err := conn.Conn().PgConn().CopyFrom(ctx, strings.NewReader(data),
		"COPY river_job (args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags) FROM STDIN")
	el := time.Since(start)
	if err != nil {
		return 0, err
	}
	if int(tag.RowsAffected()) != n {
		return 0, fmt.Errorf("copied %d of %d rows", tag.RowsAffected(), n)
	}
	return float64(n) / el.Seconds(), nil
}

// timeBulk runs `enqueue bulk` on file (piped to its stdin when stdin),
// checks that it inserted n jobs, and returns its rate and peak RSS in MB.
func timeBulk(ctx context.Context, pool *pgxpool.Pool, bin string, env []string, n int, file string, stdin bool) (rate, rssMB float64, err error) {
	if err := emptyJobs(ctx, pool); err != nil {
		return 0, 0, err
	}
	args := []string{"bulk", "--file", file}
	var in io.Reader // not an *os.File: exec pipes it, as a shell pipeline would
	if stdin {
		f, err := os.Open(file)
		if err != nil {
			return 0, 0, err
		}
		defer f.Close()
		in, args = bufio.NewReader(f), []string{"bulk", "--file", "-"}
	}
	start := time.Now()
	p, err := fleet.Start(bin, env, in, args...)
	if err != nil {
		return 0, 0, err
	}
	// The kernel's peak resident set of the process so far (VmHWM), read
	// until it exits: the last reading is its peak but for its last 20 ms.
	peak := make(chan float64, 1)
	go func() {
		var mb float64
		for {
			if v, err := vmHWM(p.Pid()); err == nil {
				mb = max(mb, v)
			}
			select {
			case <-p.Done():
				peak <- mb
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	code, err := p.Wait(10 * time.Minute)
	el := time.Since(start)
	rssMB = <-peak
	if err != nil {
		_ = p.Kill()
		return 0, 0, fmt.Errorf("enqueue %s: %w", strings.Join(args, " "), err)
	}
	if code != 0 {
		return 0, 0, fmt.Errorf("enqueue %s: exit code %d: %s", strings.Join(args, " "), code, strings.TrimSpace(p.Stdout()+p.Stderr()))
	}
	var got int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job").Scan(&got); err != nil || got != n {
		return 0, 0, fmt.Errorf("enqueue %s inserted %d of %d (%v)", strings.Join(args, " "), got, n, err)
	}
	if rssMB == 0 {
		return 0, 0, fmt.Errorf("enqueue %s: its peak resident set was never read", strings.Join(args, " "))
	}
	return float64(n) / el.Seconds(), rssMB, nil
}
