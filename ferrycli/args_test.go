package ferrycli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInterspersed(t *testing.T) {
	t.Parallel()
	app := EnqueueApp()
	for name, tc := range map[string]struct{ in, want []string }{
		"flags after kind": {
			in:   []string{"enqueue", "job", "ferry.noop", "--args", "{}", "--json"},
			want: []string{"enqueue", "job", "--args", "{}", "--json", "--", "ferry.noop"},
		},
		"flags before kind unchanged in order": {
			in:   []string{"enqueue", "job", "--json", "ferry.noop"},
			want: []string{"enqueue", "job", "--json", "--", "ferry.noop"},
		},
		"value that looks like a flag": {
			in:   []string{"enqueue", "job", "ferry.noop", "--args", "-"},
			want: []string{"enqueue", "job", "--args", "-", "--", "ferry.noop"},
		},
		"equals form": {
			in:   []string{"enqueue", "job", "k", "--queue=q", "--tag", "a1b", "--tag=c2d"},
			want: []string{"enqueue", "job", "--queue=q", "--tag", "a1b", "--tag=c2d", "--", "k"},
		},
		"double dash keeps the rest positional": {
			in:   []string{"enqueue", "job", "--", "--weird"},
			want: []string{"enqueue", "job", "--", "--weird"},
		},
		"unknown command untouched": {
			in:   []string{"enqueue", "nope", "x", "--json"},
			want: []string{"enqueue", "nope", "x", "--json"},
		},
		"program only": {
			in:   []string{"enqueue"},
			want: []string{"enqueue"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, interspersed(app, tc.in))
		})
	}
}
