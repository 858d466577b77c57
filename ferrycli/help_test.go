package ferrycli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"
)

// TestHelp_OneDefaultPerFlag: no flag's help line shows two defaults (a
// default written in its usage and urfave/cli's own "(default: 0)").
func TestHelp_OneDefaultPerFlag(t *testing.T) {
	t.Parallel()
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				line := cli.FlagStringer(f)
				require.LessOrEqual(t, strings.Count(line, "(default"), 1, "%s %s: %s", path, c.Name, line)
			}
			walk(path+" "+c.Name, c.Subcommands)
		}
	}
	walk("enqueue", EnqueueApp().Commands)
	walk("worker", WorkerApp(WorkerOptions{}).Commands)
}
