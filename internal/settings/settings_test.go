package settings

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pair is a text setting's type: "a=b".
type pair struct{ a, b string }

func (p *pair) UnmarshalText(text []byte) error {
	a, b, ok := strings.Cut(string(text), "=")
	if !ok {
		return fmt.Errorf("%q is not a=b", text)
	}
	*p = pair{a, b}
	return nil
}

func (p pair) MarshalText() ([]byte, error) { return []byte(p.a + "=" + p.b), nil }

type section struct {
	Every time.Duration `env:"X_EVERY" flag:"every" usage:"how often"`
	Keep  time.Duration `env:"X_KEEP" flag:"keep" zero:"keep" usage:"how long"`
	Count int           `env:"X_COUNT,X_OLD_COUNT" flag:"count,n" default:"the tick's" usage:"how many"`
}

type config struct {
	Name    string            `env:"X_NAME" flag:"name" usage:"a name"`
	Section section           // a section: walked
	Pair    pair              `env:"X_PAIR" flag:"pair" usage:"a pair"`
	Key     *pair             `env:"X_KEY" flag:"key" secret:"true" usage:"a secret"`
	On      bool              `env:"X_ON" flag:"on" usage:"a switch"`
	Big     int64             `env:"X_BIG" flag:"big" usage:"a number"`
	Bounds  map[string]int64  `file:"bounds[].max" usage:"a bound"`
	Code    []string          // Go only: not a setting
	Extra   map[string]string // Go only
	hidden  string
}

func TestOf_ReadsTheDeclarations(t *testing.T) {
	t.Parallel()
	defaults := config{Name: "n", Section: section{Every: time.Second, Count: 3}, Pair: pair{"a", "b"}, Key: &pair{"s", "t"}, hidden: "h"}
	got := Of(defaults)
	var paths []string
	for _, s := range got {
		paths = append(paths, s.Path)
	}
	require.Equal(t, []string{"Name", "Section.Every", "Section.Keep", "Section.Count", "Pair", "Key", "On", "Big", "Bounds"}, paths)

	byPath := map[string]Setting{}
	for _, s := range got {
		byPath[s.Path] = s
	}
	every := byPath["Section.Every"]
	require.Equal(t, []string{"X_EVERY"}, every.Env)
	require.Equal(t, []string{"every"}, every.Flag)
	require.Equal(t, "how often", every.Usage)
	require.Equal(t, "1s", every.Default, "the default is the defaulted configuration's value")
	require.False(t, every.Described)

	count := byPath["Section.Count"]
	require.Equal(t, []string{"X_COUNT", "X_OLD_COUNT"}, count.Env, "the variable, then its earlier names")
	require.Equal(t, []string{"count", "n"}, count.Flag, "the flag, then its aliases")
	require.Equal(t, "the tick's", count.Default, "the tag's words win over the value")
	require.True(t, count.Described)

	require.True(t, byPath["Section.Keep"].KeepZero)
	require.Empty(t, byPath["Section.Keep"].Default, "a zero default shows nothing")
	require.Equal(t, "a=b", byPath["Pair"].Default, "a text setting's default is its text")
	require.True(t, byPath["Key"].Secret)
	require.Empty(t, byPath["Key"].Default, "a secret's default is never shown")
	require.Equal(t, "bounds[].max", byPath["Bounds"].File)
	require.Empty(t, byPath["Bounds"].Flag, "a file key alone")
	require.Equal(t, reflect.TypeFor[int64](), byPath["Big"].Type)
}

// settingsByPath are config's settings by path.
func settingsByPath() map[string]Setting {
	byPath := map[string]Setting{}
	for _, s := range Of(config{}) {
		byPath[s.Path] = s
	}
	return byPath
}

func TestSetting_SetText(t *testing.T) {
	t.Parallel()
	byPath := settingsByPath()
	var c config
	for path, text := range map[string]string{
		"Name": "x", "Section.Every": "90s", "Section.Keep": "0", "Section.Count": "7",
		"Pair": "k=v", "Key": "s=t", "On": "true", "Big": "12345678901",
	} {
		require.NoError(t, byPath[path].SetText(&c, text), path)
	}
	require.Equal(t, config{
		Name: "x", Section: section{Every: 90 * time.Second, Keep: -1, Count: 7},
		Pair: pair{"k", "v"}, Key: &pair{"s", "t"}, On: true, Big: 12345678901,
	}, c, "a 0 of a keep-zero setting is -1 in the field")

	require.NoError(t, byPath["Key"].SetText(&c, ""))
	require.Nil(t, c.Key, "an empty text setting of pointer type is none")

	for path, want := range map[string]string{
		"Section.Every": `--every: "soon" is not a duration`,
		"Section.Count": `--count: "many" is not a whole number`,
		"On":            `--on: "maybe" is not true or false`,
		"Pair":          `"nopair" is not a=b`,
	} {
		text := map[string]string{"Section.Every": "soon", "Section.Count": "many", "On": "maybe", "Pair": "nopair"}[path]
		require.ErrorContains(t, byPath[path].SetText(&c, text), want, path)
	}
}

func TestSetting_SetValue(t *testing.T) {
	t.Parallel()
	byPath := settingsByPath()
	var c config
	require.NoError(t, byPath["Section.Every"].SetValue(&c, 2*time.Minute))
	require.NoError(t, byPath["Section.Keep"].SetValue(&c, time.Duration(0)))
	require.NoError(t, byPath["Section.Count"].SetValue(&c, 4))
	require.NoError(t, byPath["Big"].SetValue(&c, int64(5)))
	require.NoError(t, byPath["On"].SetValue(&c, true))
	require.NoError(t, byPath["Pair"].SetValue(&c, "a=b"), "a text setting takes its flag's string")
	require.Equal(t, config{Section: section{Every: 2 * time.Minute, Keep: -1, Count: 4}, Big: 5, On: true, Pair: pair{"a", "b"}}, c)
	require.ErrorContains(t, byPath["On"].SetValue(&c, 1.5), "cannot set a float64")
}

func TestOf_RefusesABadDeclaration(t *testing.T) {
	t.Parallel()
	type noUsage struct {
		A string `env:"A" flag:"a"`
	}
	type flagWithoutVariable struct {
		A string `flag:"a" usage:"u"`
	}
	type unparsable struct {
		A []string `env:"A" flag:"a" usage:"u"`
	}
	require.PanicsWithValue(t, "settings: A: a setting needs a usage, and a flag and a variable together", func() { Of(noUsage{}) })
	require.PanicsWithValue(t, "settings: A: a setting needs a usage, and a flag and a variable together", func() { Of(flagWithoutVariable{}) })
	require.PanicsWithValue(t, "settings: A: cannot parse a []string", func() { Of(unparsable{}) })
	require.Panics(t, func() { Of(&config{}) }, "not a struct")
}

// A 0 given to a setting whose zero means a default other than 0 is
// refused, naming that default; a 0 where the default is 0 is that, and a
// keep-zero setting's 0 is -1.
func TestSetting_ZeroOfADefaultRefused(t *testing.T) {
	t.Parallel()
	byPath := map[string]Setting{}
	for _, s := range Of(config{Section: section{Every: time.Second}}) {
		byPath[s.Path] = s
	}
	var c config
	require.EqualError(t, byPath["Section.Every"].SetText(&c, "0s"), "--every 0s: must be above 0 (unset, it is 1s)")
	require.EqualError(t, byPath["Section.Every"].SetValue(&c, time.Duration(0)), "--every 0s: must be above 0 (unset, it is 1s)")
	require.EqualError(t, byPath["Section.Count"].SetText(&c, "0"), "--count 0: must not be 0 (unset, it is the tick's)")
	require.NoError(t, byPath["Big"].SetText(&c, "0"), "its default is 0")
	require.NoError(t, byPath["Section.Keep"].SetText(&c, "0"))
	require.Equal(t, config{Section: section{Keep: -1}}, c, "nothing refused was set")
}
