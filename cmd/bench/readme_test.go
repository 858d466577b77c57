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

// recordedRun is how the README's paragraph on the recorded full run
// begins; it runs to the next blank line.
const recordedRun = "The full run recorded in `bench/results.json`"

// quotedFigure is a bench key in backquotes followed by its figure, as
// the README quotes them ("`worker_ratio_vs_river_best` 0.93"); a key
// followed by anything else (a parenthesis, a word) quotes no figure.
var quotedFigure = regexp.MustCompile("`([a-z0-9_]+)` ([0-9][0-9,]*(?:\\.[0-9]+)?)")

// The README's figures of the recorded run are the recorded file's: every
// key it quotes with a figure has that figure in bench/results.json,
// rounded as the README rounds it, and the revision is the file's. A new
// results.json without its paragraph (or the other way round) fails here.
func TestREADMEQuotesTheRecordedRun(t *testing.T) {
	t.Chdir("../..")
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	raw, err := os.ReadFile("bench/results.json")
	require.NoError(t, err)
	var recorded map[string]any
	require.NoError(t, json.Unmarshal(raw, &recorded))
	require.NotEqual(t, true, recorded["quick"],
		"bench/results.json holds a quick run (go tool task bench:quick writes it); the README quotes the recorded full run: git checkout bench/results.json")

	text := string(readme)
	at := strings.Index(text, recordedRun)
	require.GreaterOrEqual(t, at, 0, "the README has no paragraph beginning %q", recordedRun)
	paragraph := text[at:]
	if end := strings.Index(paragraph, "\n\n"); end >= 0 {
		paragraph = paragraph[:end]
	}
	paragraph = strings.Join(strings.Fields(paragraph), " ") // one line

	rev, _ := recorded["rev"].(string)
	require.GreaterOrEqual(t, len(rev), 7, "bench/results.json has no rev")
	require.True(t, strings.Contains(paragraph, "rev "+rev[:7]), "the README's recorded run names another revision than bench/results.json's %s", rev[:7])

	quoted := quotedFigure.FindAllStringSubmatch(paragraph, -1)
	require.GreaterOrEqual(t, len(quoted), 15, "the paragraph quotes the run's figures by key: %d found", len(quoted))
	for _, q := range quoted {
		key, figure := q[1], strings.ReplaceAll(q[2], ",", "")
		v, ok := recorded[key].(float64)
		require.True(t, ok, "the README quotes `%s` %s: no such figure in bench/results.json", key, q[2])
		decimals := 0
		if dot := strings.IndexByte(figure, '.'); dot >= 0 {
			decimals = len(figure) - dot - 1
		}
		require.Equal(t, figure, strconv.FormatFloat(v, 'f', decimals, 64),
			"the README quotes `%s` %s; bench/results.json has %v", key, q[2], v)
	}
}
