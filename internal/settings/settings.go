// Package settings reads the declaration of every setting of ferry's
// configuration from the tags of the field that holds it, so that the
// environment variable, the flag and the config-file key of a setting are
// written once, next to the field, and whatever needs them (the worker's
// flags, the configuration reference) reads them from there.
//
// A setting is a field with an env, flag or file tag:
//
//		SettleAfter time.Duration `env:"FERRY_SETTLE_AFTER" flag:"settle-after" usage:"…"`
//
//	  - env: the environment variable, then any earlier names it still
//	    answers to, comma-separated;
//	  - flag: the flag of `worker run` without its dashes, then its aliases;
//	  - file: the key of the config file (FERRY_CONFIG) that sets it too;
//	  - usage: one line of help;
//	  - default: the default as shown, when it is not the field's value in a
//	    defaulted configuration (a default computed from another setting);
//	  - zero:"keep": a 0 given as flag or variable keeps everything, which
//	    the field says with -1 (its zero is the default);
//	  - secret:"true": its value is never shown.
//
// A field of struct type without those tags is a section: its fields are
// walked in turn. Any other field (a list of kinds or routes, a logger) is
// given in Go only.
package settings

import (
	"encoding"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Setting is one declared setting.
type Setting struct {
	// Path is the field's path in the configuration, as in Go:
	// "Liveness.SettleAfter".
	Path string
	// Env is the environment variable, then its earlier names.
	Env []string
	// Flag is the flag's name, then its aliases (without dashes).
	Flag []string
	// File is the config file's key, or "".
	File string
	// Usage is one line of help.
	Usage string
	// Default is the default as shown ("" when there is none to show).
	Default string
	// Described: Default is the tag's words, not a value of the field
	// ("--database-url", "a third of the tick").
	Described bool
	// Type is the field's type.
	Type reflect.Type
	// KeepZero: a 0 given as flag or variable is -1 in the field.
	KeepZero bool
	// Secret: the value is never shown.
	Secret bool

	index []int
}

var (
	durationType      = reflect.TypeFor[time.Duration]()
	textUnmarshalType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// Of returns the settings declared in the struct defaults, in field order,
// each with its default read from defaults (a configuration with every
// default filled in) unless its tag says otherwise. It panics on a
// declaration it cannot use (a bad tag or a type it cannot parse): a
// programming error that every test finds.
func Of(defaults any) []Setting {
	v := reflect.ValueOf(defaults)
	if v.Kind() != reflect.Struct {
		panic(fmt.Sprintf("settings: Of(%T): not a struct", defaults))
	}
	var out []Setting
	walk(v, "", nil, &out)
	return out
}

func walk(v reflect.Value, prefix string, index []int, out *[]Setting) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		idx := append(append([]int(nil), index...), i)
		env, flag, file := f.Tag.Get("env"), f.Tag.Get("flag"), f.Tag.Get("file")
		if env == "" && flag == "" && file == "" {
			if f.Type.Kind() == reflect.Struct && f.Type != durationType {
				walk(v.Field(i), prefix+f.Name+".", idx, out)
			}
			continue
		}
		s := Setting{
			Path:     prefix + f.Name,
			Env:      split(env),
			Flag:     split(flag),
			File:     file,
			Usage:    f.Tag.Get("usage"),
			Type:     f.Type,
			KeepZero: f.Tag.Get("zero") == "keep",
			Secret:   f.Tag.Get("secret") == "true",
			index:    idx,
		}
		if s.Usage == "" || (len(s.Flag) > 0) != (len(s.Env) > 0) {
			panic(fmt.Sprintf("settings: %s: a setting needs a usage, and a flag and a variable together", s.Path))
		}
		if len(s.Flag) > 0 && !parsable(f.Type) {
			panic(fmt.Sprintf("settings: %s: cannot parse a %s", s.Path, f.Type))
		}
		if d, ok := f.Tag.Lookup("default"); ok {
			s.Default, s.Described = d, true
		} else if !s.Secret {
			s.Default = format(v.Field(i))
		}
		*out = append(*out, s)
	}
}

func split(tag string) []string {
	if tag == "" {
		return nil
	}
	return strings.Split(tag, ",")
}

func parsable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64:
		return true
	case reflect.Pointer:
		return t.Implements(textUnmarshalType)
	}
	return reflect.PointerTo(t).Implements(textUnmarshalType)
}

// format shows a default as the flag's help does; "" for a zero value.
func format(v reflect.Value) string {
	if v.IsZero() {
		return ""
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		b, err := m.MarshalText()
		if err != nil {
			return ""
		}
		return string(b)
	}
	return fmt.Sprint(v.Interface())
}

// Field is the setting's field in the configuration cfg points to.
func (s Setting) Field(cfg any) reflect.Value {
	return reflect.ValueOf(cfg).Elem().FieldByIndex(s.index)
}

// SetText parses text into the setting's field in the configuration cfg
// points to, as a flag or variable gives it. Its error is the parser's
// own, or says what was expected.
func (s Setting) SetText(cfg any, text string) error {
	f := s.Field(cfg)
	switch {
	case f.Type() == durationType:
		d, err := time.ParseDuration(text)
		if err != nil {
			return fmt.Errorf("%s: %q is not a duration such as 90s or 1h", s.name(), text)
		}
		return s.setInt(f, int64(d))
	case f.Kind() == reflect.Pointer && strings.TrimSpace(text) == "":
		f.SetZero()
	case f.Kind() == reflect.Pointer:
		p := reflect.New(f.Type().Elem())
		if err := p.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(text)); err != nil {
			return err
		}
		f.Set(p)
	case reflect.PointerTo(f.Type()).Implements(textUnmarshalType):
		p := reflect.New(f.Type())
		if err := p.Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(text)); err != nil {
			return err
		}
		f.Set(p.Elem())
	case f.Kind() == reflect.String:
		f.SetString(text)
	case f.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(text))
		if err != nil {
			return fmt.Errorf("%s: %q is not true or false", s.name(), text)
		}
		f.SetBool(b)
	default:
		n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: %q is not a whole number", s.name(), text)
		}
		return s.setInt(f, n)
	}
	return nil
}

// SetValue sets the setting's field to v, a value of the field's own kind
// as a typed flag gives it (a string for a text setting).
func (s Setting) SetValue(cfg any, v any) error {
	f := s.Field(cfg)
	switch x := v.(type) {
	case string:
		return s.SetText(cfg, x)
	case time.Duration:
		return s.setInt(f, int64(x))
	case int:
		return s.setInt(f, int64(x))
	case int64:
		return s.setInt(f, x)
	case bool:
		f.SetBool(x)
	default:
		return fmt.Errorf("settings: %s: cannot set a %T", s.Path, v)
	}
	return nil
}

// setInt sets f to n: -1 for a 0 given to a zero:"keep" setting. A 0 given
// to a setting whose zero is a default other than 0 is refused: taken, it
// would be that default, not what was asked.
func (s Setting) setInt(f reflect.Value, n int64) error {
	switch {
	case n == 0 && s.KeepZero:
		n = -1
	case n == 0 && s.Default != "":
		if f.Type() == durationType {
			return fmt.Errorf("%s 0s: must be above 0 (unset, it is %s)", s.name(), s.Default)
		}
		return fmt.Errorf("%s 0: must not be 0 (unset, it is %s)", s.name(), s.Default)
	}
	f.SetInt(n)
	return nil
}

// name is how an error names the setting: its flag, else its path.
func (s Setting) name() string {
	if len(s.Flag) > 0 {
		return "--" + s.Flag[0]
	}
	return s.Path
}
