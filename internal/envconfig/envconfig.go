// Package envconfig reads a service's Config from the environment, the one
// way both services (and the streams bootstrap) do it: struct tags read by
// github.com/caarlos0/env/v11, every error collected and naming its
// variable, and one rule for numbers (below).
//
// A Config is filled with its defaults first; Parse then overwrites the
// fields whose variable is set, and leaves the others alone. Validation
// (ranges, fields required together) stays with each Config.
package envconfig

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/dustin/go-humanize"
)

// Environ is the process's environment as Parse takes it.
func Environ() map[string]string { return env.ToMap(os.Environ()) }

// Parse sets the fields of *dst tagged `env:"NAME"` (nested structs with
// `envPrefix:"PREFIX_"`) from environ, trimming spaces around values and
// list items (`envSeparator:","`). No duration or integer setting of the
// platform has a meaning below zero, so a negative one is an error. Each
// error names its variable; they are joined.
func Parse(dst any, environ map[string]string) error {
	err := env.ParseWithOptions(dst, env.Options{Environment: environ, FuncMap: parsers})
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return err
	}
	vars := variables(reflect.TypeOf(dst).Elem(), "")
	errs := make([]error, len(agg.Errors))
	for i, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) && vars[pe.Name] != "" {
			e = fmt.Errorf("%s: %w", vars[pe.Name], pe.Err)
		}
		errs[i] = e
	}
	return errors.Join(errs...)
}

var parsers = map[reflect.Type]env.ParserFunc{
	reflect.TypeFor[string](): func(v string) (any, error) { return strings.TrimSpace(v), nil },
	reflect.TypeFor[time.Duration](): func(v string) (any, error) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("%q is not a duration such as 250ms or 2m", v)
		}
		return d, nil
	},
	reflect.TypeFor[int](): func(v string) (any, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a non-negative integer", v)
		}
		return n, nil
	},
}

// variables maps the Go field names of t (nested ones too) to their
// variables, for the errors: caarlos0/env names the field only.
func variables(t reflect.Type, prefix string) map[string]string {
	out := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Type.Kind() == reflect.Struct {
			for k, v := range variables(f.Type, prefix+f.Tag.Get("envPrefix")) {
				out[k] = v
			}
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("env"), ","); name != "" {
			if other := out[f.Name]; other != "" {
				name = other + " or " + prefix + name // two structs, one field name
			} else {
				name = prefix + name
			}
			out[f.Name] = name
		}
	}
	return out
}

// Bytes is a size read as 1400MiB, 2GiB, 512MB, 1.5GB or 1000000 (bytes,
// go-humanize's syntax), or "off" (-1, no limit).
type Bytes int64

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *Bytes) UnmarshalText(text []byte) error {
	v := strings.TrimSpace(string(text))
	if v == "off" {
		*b = -1
		return nil
	}
	n, err := humanize.ParseBytes(v)
	if err != nil || n == 0 || n > 1<<62 {
		return fmt.Errorf("%q is not a positive size such as 1400MiB, or off", v)
	}
	*b = Bytes(n)
	return nil
}
