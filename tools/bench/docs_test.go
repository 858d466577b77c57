package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchPage is the page that quotes the recorded full run's figures; the
// README quotes none (TestREADMEQuotesNoFigure).
const benchPage = "docs/bench.md"

// recordedRun is how the bench page's paragraph on the recorded full run
// begins; it runs to the next blank line.
const recordedRun = "The full run recorded in `bench/results.json`"

// A figure as the bench page writes it: digits, thousands commas, decimals.
const figureRE = `([0-9][0-9,]*(?:\.[0-9]+)?)`

// quotedFigure is a bench key in backquotes followed by its figure, as
// the bench page quotes them ("`worker_ratio_vs_river_best` 0.93"); a key
// followed by anything else (a parenthesis, a word) quotes no figure.
var quotedFigure = regexp.MustCompile("`([a-z0-9_]+)` " + figureRE)

// describedFigures are the figures the paragraph quotes by what they
// measure rather than by key: each phrase (its figures captured) and the
// keys of its figures, in order. The paragraph must say each of them.
var describedFigures = []struct {
	phrase string
	keys   []string
}{
	{`ferry's defaults ` + figureRE + ` jobs/s against River at its best ` + figureRE, []string{"ferry_default_jobs_per_sec", "river_best_jobs_per_sec"}},
	{`insert-to-start p50 ` + figureRE + ` ms and p99 ` + figureRE + ` ms`, []string{"latency_insert_to_start_p50_ms", "latency_insert_to_start_p99_ms"}},
	{`the warm-up's own p99 ` + figureRE + ` ms`, []string{"latency_insert_to_start_cold_p99_ms"}},
	{`outbox commit to delivery p50 ` + figureRE + ` ms and p99 ` + figureRE + ` ms`, []string{"outbox_e2e_p50_ms", "outbox_e2e_p99_ms"}},
	{`max ` + figureRE + ` ms, relay lag p99 ` + figureRE + ` ms, fetch lag p99 ` + figureRE + ` ms`, []string{"outbox_e2e_max_ms", "outbox_relay_lag_p99_ms", "outbox_fetch_lag_p99_ms"}},
	{figureRE + ` ordered messages a second against ` + figureRE + ` unordered`, []string{"ordered_msgs_per_sec", "unordered_msgs_per_sec"}},
	{`and ` + figureRE + ` from a pipe`, []string{"bulk_stdin_ratio_vs_copy"}},
	{`peak RSS ` + figureRE + ` and ` + figureRE + ` MB`, []string{"bulk_file_peak_rss_mb", "bulk_stdin_peak_rss_mb"}},
	{`tick lag to start p99 ` + figureRE + ` ms`, []string{"tick_lag_start_p99_ms"}},
	{`demotion at most ` + figureRE + ` ms`, []string{"partition_demotion_ms_max"}},
	{`lock handover p99 ` + figureRE + ` ms`, []string{"lock_handover_p99_ms"}},
}

// byMinute is the sustained run's p99 by minute as the paragraph lists it.
var byMinute = regexp.MustCompile(`p99 by minute ((?:[0-9.]+, )*[0-9.]+ and [0-9.]+) ms`)

// The bench page's figures of the recorded run are the recorded file's:
// the revision it names, every figure it quotes after a key and every
// figure it quotes by description (describedFigures, the p99 by minute) is
// the file's, rounded as the page rounds it. A new results.json without
// its paragraph (or the other way round) fails here.
func TestBenchPageQuotesTheRecordedRun(t *testing.T) {
	t.Chdir("../..")
	page, err := os.ReadFile(benchPage)
	require.NoError(t, err)
	raw, err := os.ReadFile("bench/results.json")
	require.NoError(t, err)
	var recorded map[string]any
	require.NoError(t, json.Unmarshal(raw, &recorded))
	require.NotEqual(t, true, recorded["quick"],
		"bench/results.json holds a quick run (go tool task bench:quick writes it); %s quotes the recorded full run: git checkout bench/results.json", benchPage)

	text := string(page)
	at := strings.Index(text, recordedRun)
	require.GreaterOrEqual(t, at, 0, "%s has no paragraph beginning %q", benchPage, recordedRun)
	paragraph := text[at:]
	if end := strings.Index(paragraph, "\n\n"); end >= 0 {
		paragraph = paragraph[:end]
	}
	paragraph = strings.Join(strings.Fields(paragraph), " ") // one line

	rev, _ := recorded["rev"].(string)
	require.GreaterOrEqual(t, len(rev), 7, "bench/results.json has no rev")
	require.True(t, strings.Contains(paragraph, "rev "+rev[:7]), "%s's recorded run names another revision than bench/results.json's %s", benchPage, rev[:7])

	// same checks that figure, as quoted, is v rounded as quoted.
	same := func(what, figure string, v float64) {
		t.Helper()
		plain := strings.ReplaceAll(figure, ",", "")
		decimals := 0
		if dot := strings.IndexByte(plain, '.'); dot >= 0 {
			decimals = len(plain) - dot - 1
		}
		require.Equal(t, plain, strconv.FormatFloat(v, 'f', decimals, 64),
			"%s quotes %s as %s; bench/results.json has %v", benchPage, what, figure, v)
	}
	figure := func(key string) float64 {
		t.Helper()
		v, ok := recorded[key].(float64)
		require.True(t, ok, "%s quotes `%s`: no such figure in bench/results.json", benchPage, key)
		return v
	}

	quoted := quotedFigure.FindAllStringSubmatch(paragraph, -1)
	require.GreaterOrEqual(t, len(quoted), 15, "the paragraph quotes the run's figures by key: %d found", len(quoted))
	for _, q := range quoted {
		same("`"+q[1]+"`", q[2], figure(q[1]))
	}

	for _, d := range describedFigures {
		m := regexp.MustCompile(d.phrase).FindStringSubmatch(paragraph)
		require.NotNil(t, m, "the paragraph no longer says %q: quote the figure so, or change describedFigures with it", d.phrase)
		for i, key := range d.keys {
			same("`"+key+"`", m[i+1], figure(key))
		}
	}

	m := byMinute.FindStringSubmatch(paragraph)
	require.NotNil(t, m, "the paragraph no longer lists the sustained run's p99 by minute")
	listed := strings.Split(strings.Replace(m[1], " and ", ", ", 1), ", ")
	minutes, _ := recorded["sustained_p99_ms_by_minute"].([]any)
	require.Len(t, listed, len(minutes), "%s lists %d minutes; bench/results.json has %d", benchPage, len(listed), len(minutes))
	for i, f := range listed {
		v, ok := minutes[i].(float64)
		require.True(t, ok, "sustained_p99_ms_by_minute[%d] is no number", i)
		same("the p99 of minute "+strconv.Itoa(i+1), f, v)
	}
}

// measured is a figure as a measurement writes it: a number followed by a
// unit of time or rate, a multiple, a share; or a decimal number (a ratio).
// Dotted addresses and versions (127.0.0.1, v1.2.3) are not decimals.
var measured = regexp.MustCompile(`(?:^|[^0-9.v])([0-9][0-9,]*(?:\.[0-9]+)? ?(?:jobs/s|ms\b|µs|×|%|messages a second)|[0-9]+\.[0-9]+)(?:$|[^0-9.])`)

// The README quotes no measured figure: every figure lives on a page whose
// figures a test holds to bench/results.json (TestBenchPageQuotesTheRecordedRun),
// and the README links there.
func TestREADMEQuotesNoFigure(t *testing.T) {
	t.Chdir("../..")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	for i, line := range strings.Split(string(readme), "\n") {
		for _, m := range measured.FindAllStringSubmatch(line, -1) {
			t.Errorf("README.md:%d quotes the figure %q: quote it in %s, whose figures a test holds to bench/results.json, and link there", i+1, m[1], benchPage)
		}
	}
}
