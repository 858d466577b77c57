package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/internal/base/scratchdb"
)

// broadcastResult is -mode broadcast: messages published at a steady
// rate by this process, signed, and received by subscriber processes (this
// binary in -mode broadcast-sub), each of which measures publish (the
// published_at stamped before the NOTIFY) to delivery (Next returning).
type broadcastResult struct {
	Subscribers int     `json:"subscribers"`
	Rate        int     `json:"rate"`
	Published   int     `json:"published"`
	Received    []int   `json:"received"`
	Gaps        []int   `json:"gaps"`
	MsgsPerSec  float64 `json:"msgs_per_sec"`
	P50MS       float64 `json:"p50_ms"`
	P99MS       float64 `json:"p99_ms"`
	MaxMS       float64 `json:"max_ms"`
}

// subReport is what a subscriber process prints when the run is over.
type subReport struct {
	Received int       `json:"received"`
	Gaps     int       `json:"gaps"`
	LatMS    []float64 `json:"lat_ms"`
}

const (
	benchChannel = "bench.broadcast"
	benchDone    = "bench.done"
)

func broadcastBench(ctx context.Context, serverURL string, subs, rate int, dur time.Duration) (broadcastResult, error) {
	res := broadcastResult{Subscribers: subs, Rate: rate}
	url, drop, err := scratchdb.New(ctx, serverURL, true)
	if err != nil {
		return res, err
	}
	defer func() { _ = drop() }()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keysEnv := broadcast.EnvKeys + "=" + base64.StdEncoding.EncodeToString(key)

	self, err := os.Executable()
	if err != nil {
		return res, err
	}
	type child struct {
		cmd *exec.Cmd
		out *bufio.Scanner
	}
	var children []child
	defer func() {
		for _, c := range children {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	}()
	for range subs {
		cmd := exec.CommandContext(ctx, self, "-mode", "broadcast-sub")
		cmd.Env = append(os.Environ(), "BENCH_BROADCAST_URL="+url, keysEnv)
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return res, err
		}
		if err := cmd.Start(); err != nil {
			return res, err
		}
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		children = append(children, child{cmd, sc})
		if !sc.Scan() || sc.Text() != "ready" {
			return res, fmt.Errorf("subscriber %d did not start: %v", len(children), sc.Err())
		}
	}

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	keys, _ := broadcast.ParseKeys(strings.TrimPrefix(keysEnv, broadcast.EnvKeys+"="))
	b, err := broadcast.New(broadcast.Config{Pool: pool, Keys: keys})
	if err != nil {
		return res, err
	}
	defer b.Close()

	n := int(dur.Seconds() * float64(rate))
	every := time.Second / time.Duration(rate)
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(i) * every)); d > 0 {
			time.Sleep(d)
		}
		if err := b.Publish(ctx, benchChannel, map[string]int{"seq": i}); err != nil {
			return res, err
		}
	}
	elapsed := time.Since(start)
	res.Published = n
	res.MsgsPerSec = float64(n) / elapsed.Seconds()
	if err := b.Publish(ctx, benchDone, n); err != nil {
		return res, err
	}
	var all []float64
	for i, c := range children {
		if !c.out.Scan() {
			return res, fmt.Errorf("subscriber %d ended without a report: %v", i+1, c.out.Err())
		}
		var rep subReport
		if err := json.Unmarshal(c.out.Bytes(), &rep); err != nil {
			return res, fmt.Errorf("subscriber %d: %w", i+1, err)
		}
		res.Received = append(res.Received, rep.Received)
		res.Gaps = append(res.Gaps, rep.Gaps)
		all = append(all, rep.LatMS...)
	}
	res.P50MS, res.P99MS, res.MaxMS = pct(all, 50), pct(all, 99), pct(all, 100)
	return res, nil
}

// broadcastSub is -mode broadcast-sub, a subscriber process of
// broadcastBench: it prints "ready" once it listens, then one JSON report
// when the done message arrives.
func broadcastSub(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, os.Getenv("BENCH_BROADCAST_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	keys, err := broadcast.ParseKeys(os.Getenv(broadcast.EnvKeys))
	if err != nil {
		return err
	}
	b, err := broadcast.New(broadcast.Config{Pool: pool, Keys: keys, QueueSize: 1 << 16})
	if err != nil {
		return err
	}
	defer b.Close()
	sub, err := b.Subscribe(ctx, benchChannel, benchDone)
	if err != nil {
		return err
	}
	fmt.Println("ready")
	var rep subReport
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			return err
		}
		now := time.Now()
		switch {
		case ev.Gap:
			rep.Gaps++
		case ev.Channel == benchDone:
			if n := rep.Received; n == 0 {
				return errors.New("no message received")
			}
			if forged := b.Dropped()[broadcast.DropForged]; forged > 0 {
				return fmt.Errorf("%d messages dropped as forged", forged)
			}
			return json.NewEncoder(os.Stdout).Encode(rep)
		default:
			rep.Received++
			rep.LatMS = append(rep.LatMS, float64(now.Sub(ev.PublishedAt).Microseconds())/1000)
		}
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
