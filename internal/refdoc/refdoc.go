// Package refdoc renders ferry's generated references, docs/configuration.md,
// docs/cli.md and docs/metrics.md, from the declarations in the code: the
// settings of ferry.Config's fields (internal/settings), the config file's
// entries (their yaml, doc and default tags), the urfave/cli apps of
// `enqueue` and `worker`, and the metrics a server registers. The root
// package's reference_test.go writes the pages with -update (`go tool task
// docs`) and fails when a committed page differs from what the code
// declares.
package refdoc

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ferryq/ferry/internal/metrics"
	"github.com/ferryq/ferry/internal/settings"
)

// Command rewrites the generated pages.
const Command = "go tool task docs"

// header opens every page: what it is, and how it is made.
func header(title, what, from string) string {
	return fmt.Sprintf("# %s\n\n%s Generated from %s: do not edit it by hand; `%s` writes it again, and a test fails when it and the code differ.\n\n", title, what, from, Command)
}

// Configuration renders docs/configuration.md: the settings of ferry.Config
// (env variable, flag, config-file key), the other flags of `worker run`
// (run's flags, those that are no setting), the keys of the config file
// (file, the type its YAML decodes into) and the variables the enqueue
// app's flags read.
func Configuration(set []settings.Setting, run []cli.Flag, file reflect.Type, enqueue *cli.App) (string, error) {
	var b strings.Builder
	b.WriteString(header("Configuration reference",
		"Every environment variable, flag and config-file key of ferry's `worker`, with its type, default and meaning.",
		"their declarations in the code (the tags of `ferry.Config`'s fields, the config file's entries and the CLI's flags)"))

	b.WriteString("## Settings of `worker run`\n\n")
	b.WriteString("Each is an environment variable and a flag of `worker run` (the flag wins); an embedder sets the field of `ferry.Config` named in the last column. A setting with a config-file key is set in the file too (`FERRY_CONFIG`), and the file's value wins over the variable's.\n\n")
	b.WriteString("| Variable | Flag | Type | Default | Description | Field |\n|---|---|---|---|---|---|\n")
	flags := map[string]bool{}
	fileKeys := map[string]settings.Setting{}
	for _, s := range set {
		if s.File != "" {
			fileKeys[s.File] = s
		}
		if len(s.Env) == 0 {
			continue
		}
		flags[s.Flag[0]] = true
		usage := s.Usage
		if s.File != "" {
			usage += fmt.Sprintf(" (config file: `%s`)", s.File)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | `%s` |\n", names(s.Env, ""), names(s.Flag, "--"), typeOf(s.Type), settingDefault(s), cell(usage), s.Path)
	}

	b.WriteString("\n## Other flags of `worker run`\n\n")
	b.WriteString("| Variable | Flag | Type | Default | Description |\n|---|---|---|---|---|\n")
	for _, f := range run {
		if flags[f.Names()[0]] {
			continue
		}
		d, ok := f.(cli.DocGenerationFlag)
		if !ok {
			return "", fmt.Errorf("refdoc: flag --%s documents nothing", f.Names()[0])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", names(d.GetEnvVars(), ""), names(f.Names(), "--"), flagType(f), value(strings.Trim(d.GetDefaultText(), `"`)), cell(d.GetUsage()))
	}
	b.WriteString("\n`worker run` also reads the OpenTelemetry SDK's variables (`OTEL_TRACES_EXPORTER`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SDK_DISABLED` …) to export traces.\n")

	b.WriteString("\n## The config file\n\n")
	b.WriteString("`FERRY_CONFIG` (`--config`) names a YAML file. Unknown keys, unknown job kinds, bad expressions or zones and duplicate names are refused at start, with one line naming the entry and the key. Secrets are never written in the file: a key ending in `_env` names the environment variable that holds one.\n")
	rows, err := fileRows(file, "", fileKeys)
	if err != nil {
		return "", err
	}
	b.WriteString(rows)
	for key, s := range fileKeys {
		return "", fmt.Errorf("refdoc: setting %s declares config-file key %s, which the config file does not have", s.Path, key)
	}

	b.WriteString("\n## Environment of `enqueue`\n\n")
	b.WriteString("The variables that `enqueue`'s flags read when the flag is not given; see [the CLI reference](cli.md) for each command.\n\n")
	b.WriteString("| Variable | Flag | Commands | Description |\n|---|---|---|---|\n")
	type envFlag struct {
		flag, usage string
		commands    []string
	}
	byEnv := map[string]*envFlag{}
	walkCommands(enqueue.Name, enqueue.Commands, func(path string, c *cli.Command) {
		for _, f := range c.Flags {
			d, ok := f.(cli.DocGenerationFlag)
			if !ok {
				continue
			}
			for _, env := range d.GetEnvVars() {
				e := byEnv[env]
				if e == nil {
					e = &envFlag{flag: "--" + f.Names()[0], usage: d.GetUsage()}
					byEnv[env] = e
				}
				e.commands = append(e.commands, "`"+path+"`")
			}
		}
	})
	var leaves []string
	walkCommands(enqueue.Name, enqueue.Commands, func(path string, c *cli.Command) {
		if len(c.Subcommands) == 0 {
			leaves = append(leaves, "`"+path+"`")
		}
	})
	envs := make([]string, 0, len(byEnv))
	for env := range byEnv {
		envs = append(envs, env)
	}
	slices.Sort(envs)
	for _, env := range envs {
		e := byEnv[env]
		commands := strings.Join(e.commands, ", ")
		if len(e.commands) > len(leaves)/2 {
			commands = "every command but " + strings.Join(slices.DeleteFunc(slices.Clone(leaves), func(l string) bool { return slices.Contains(e.commands, l) }), ", ")
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s |\n", env, e.flag, commands, cell(e.usage))
	}
	return b.String(), nil
}

// fileRows renders the keys of the struct type t at prefix: a table of its
// scalar keys, then a section for each key that holds a struct or a list
// of them. Each field must have a yaml and a doc tag; fileKeys are the
// keys that settings declare, removed as they are met.
func fileRows(t reflect.Type, prefix string, fileKeys map[string]settings.Setting) (string, error) {
	var table, sections strings.Builder
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		doc := f.Tag.Get("doc")
		if name == "" || doc == "" {
			return "", fmt.Errorf("refdoc: config file field %s.%s needs a yaml and a doc tag (the line of docs/configuration.md)", t, f.Name)
		}
		key := prefix + name
		ft := f.Type
		list := ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct
		if list {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			if list {
				key += "[]"
			}
			fmt.Fprintf(&sections, "\n### `%s`\n\n%s.", key, upper(doc))
			if list {
				sections.WriteString(" A list, each entry with these keys:")
			}
			sections.WriteString("\n")
			rows, err := fileRows(ft, key+".", fileKeys)
			if err != nil {
				return "", err
			}
			sections.WriteString(rows)
			continue
		}
		if s, ok := fileKeys[key]; ok {
			doc += fmt.Sprintf(" (setting `%s`)", s.Path)
			delete(fileKeys, key)
		}
		if table.Len() == 0 {
			table.WriteString("\n| Key | Type | Default | Description |\n|---|---|---|---|\n")
		}
		typ := f.Tag.Get("type")
		if typ == "" {
			typ = typeOf(f.Type)
		}
		fmt.Fprintf(&table, "| `%s` | %s | %s | %s |\n", key, typ, words(f.Tag.Get("default")), cell(doc))
	}
	return table.String() + sections.String(), nil
}

// names shows a variable or flag and its earlier names or aliases.
func names(ns []string, dashes string) string {
	if len(ns) == 0 {
		return ""
	}
	out := "`" + dashes + ns[0] + "`"
	if len(ns) > 1 {
		var also []string
		for _, n := range ns[1:] {
			if len(n) == 1 && dashes != "" {
				also = append(also, "`-"+n+"`")
			} else {
				also = append(also, "`"+dashes+n+"`")
			}
		}
		out += " (or " + strings.Join(also, ", ") + ")"
	}
	return out
}

// typeOf names a setting's or a key's type as a user writes it.
func typeOf(t reflect.Type) string {
	if t == reflect.TypeFor[time.Duration]() {
		return "duration"
	}
	switch t.Kind() {
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Struct {
			return "text"
		}
		return typeOf(t.Elem())
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "integer"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.String {
			return "list of strings"
		}
		return "text"
	case reflect.Map:
		if t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String {
			return "map of strings"
		}
		if t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.Interface {
			return "map"
		}
		return "text"
	}
	return "text"
}

func flagType(f cli.Flag) string {
	switch f.(type) {
	case *cli.BoolFlag:
		return "boolean"
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
		return "integer"
	case *cli.DurationFlag:
		return "duration"
	case *cli.StringSliceFlag:
		return "list of strings"
	}
	return "string"
}

// settingDefault shows a setting's default: a value as code, a
// description as words.
func settingDefault(s settings.Setting) string {
	switch {
	case s.Secret && s.Default == "":
		return "none"
	case s.Described:
		return words(s.Default)
	}
	return value(s.Default)
}

// value shows a default value as code.
func value(v string) string {
	if v == "" {
		return ""
	}
	return "`" + v + "`"
}

// words shows a default a tag describes: as code when it is one word (a
// value, a flag or a variable: 24, skip, --database-url,
// FERRY_QUEUE_MAX_LENGTH), as words otherwise (the kind's, FERRY_QUEUES').
func words(d string) string {
	if strings.ContainsAny(d, " '") {
		return cell(d)
	}
	return value(d)
}

// cell is text fit for a table's cell.
func cell(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ")
}

func upper(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// walkCommands calls fn for each visible command under cmds, depth first,
// with its path from prefix ("enqueue jobs list").
func walkCommands(prefix string, cmds []*cli.Command, fn func(path string, c *cli.Command)) {
	for _, c := range cmds {
		if c.Hidden {
			continue
		}
		path := prefix + " " + c.Name
		fn(path, c)
		walkCommands(path, c.Subcommands, fn)
	}
}

// CLI renders docs/cli.md: the help of each app that newApps build, and of
// each of its commands, recursively, as `APP CMD … --help` prints it.
// Each help is printed by an app of its own, fresh from its constructor.
func CLI(newApps ...func() *cli.App) (string, error) {
	var b strings.Builder
	b.WriteString(header("Command-line reference",
		"The help of every command of ferry's two binaries, `enqueue` (the operator's CLI) and `worker` (the job workers and migrations), as `--help` prints it.",
		"the commands' definitions (package `ferrycli`)"))
	type page struct{ path, help string }
	var pages []page
	for _, newApp := range newApps {
		app := newApp()
		paths := [][]string{{app.Name}}
		walkCommands(app.Name, app.Commands, func(path string, _ *cli.Command) {
			paths = append(paths, strings.Fields(path))
		})
		for _, p := range paths {
			help, err := helpOf(newApp, p)
			if err != nil {
				return "", err
			}
			pages = append(pages, page{strings.Join(p, " "), help})
		}
	}
	for _, p := range pages {
		fmt.Fprintf(&b, "- [`%s`](#%s)\n", p.path, strings.ReplaceAll(p.path, " ", "-"))
	}
	for _, p := range pages {
		fmt.Fprintf(&b, "\n## %s\n\n```text\n%s\n```\n", p.path, strings.TrimRight(p.help, "\n"))
	}
	return b.String(), nil
}

// helpOf is what `path… --help` prints.
func helpOf(newApp func() *cli.App, path []string) (string, error) {
	var out bytes.Buffer
	app := newApp()
	app.Writer, app.ErrWriter = &out, &out
	app.ExitErrHandler = func(*cli.Context, error) {}
	if err := app.Run(append(slices.Clone(path), "--help")); err != nil {
		return "", fmt.Errorf("refdoc: %s --help: %w", strings.Join(path, " "), err)
	}
	return trimLines(out.String()), nil
}

// trimLines drops the spaces that end lines (tabwriter's padding).
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// Metrics renders docs/metrics.md from the families a server's registry
// describes.
func Metrics(families []metrics.Family) string {
	var b strings.Builder
	b.WriteString(header("Metrics reference",
		"Every Prometheus metric a `worker` serves at `/metrics` on the admin address (`FERRY_ADMIN_ADDR`), with its type, labels and help; the Go client's own `go_*` and `process_*` metrics are served beside them.",
		"the registry a server builds with every capability on"))
	b.WriteString("| Metric | Type | Labels | Help |\n|---|---|---|---|\n")
	for _, f := range families {
		labels := make([]string, len(f.Labels))
		for i, l := range f.Labels {
			labels[i] = "`" + l + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, f.Type, strings.Join(labels, ", "), cell(f.Help))
	}
	return b.String()
}
