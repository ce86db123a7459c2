package server

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kilnci/kiln/internal/suggest"
)

// checkYAML walks a configuration file's YAML against Config before it is
// decoded, so each mistake is reported by its dotted key and line in the
// words docs/configuration.md uses — an unknown key with the closest known
// one, a value that is not a duration — never as the decoder's Go type
// names (`field expirey not found in type server.QueueConfig`).
func checkYAML(doc *yaml.Node) []error {
	if doc == nil || doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil // an empty document
	}
	all := allKeys()
	var errs []error
	var walk func(n *yaml.Node, t reflect.Type, prefix string)
	walk = func(n *yaml.Node, t reflect.Type, prefix string) {
		if n.Kind != yaml.MappingNode {
			what := "the file"
			if prefix != "" {
				what = strings.TrimSuffix(prefix, ".")
			}
			errs = append(errs, fmt.Errorf("line %d: %s is a section of keys (key: value), not %s", n.Line, what, nodeWhat(n)))
			return
		}
		fields := map[string]reflect.StructField{}
		var names []string
		for i := range t.NumField() {
			f := t.Field(i)
			name := f.Tag.Get("yaml")
			fields[name] = f
			names = append(names, name)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			key := prefix + k.Value
			f, ok := fields[k.Value]
			if !ok {
				errs = append(errs, fmt.Errorf("line %d: unknown key %s%s", k.Line, key, closestKey(k.Value, prefix, names, all)))
				continue
			}
			switch {
			case isSection(f.Type):
				walk(v, f.Type, key+".")
			case isScalar(f.Type):
				if err := v.Decode(reflect.New(f.Type).Interface()); err != nil || v.Kind != yaml.ScalarNode {
					errs = append(errs, fmt.Errorf("line %d: %s: %s is not %s", v.Line, key, nodeWhat(v), scalarWants(f.Type)))
				}
			}
		}
	}
	walk(root, reflect.TypeOf(Config{}), "")
	return errs
}

// closestKey says which key was probably meant: a sibling spelt alike, or
// the same name in another section (queue.expiry written under agents).
func closestKey(name, prefix string, siblings, all []string) string {
	if s := suggest.Closest(name, siblings); s != "" {
		return "; did you mean " + prefix + s + "?"
	}
	for _, k := range all {
		if k == name || strings.HasSuffix(k, "."+name) {
			return "; did you mean " + k + "?"
		}
	}
	if prefix == "" || len(siblings) == 0 {
		return "; docs/configuration.md lists every key"
	}
	return "; the keys of " + strings.TrimSuffix(prefix, ".") + " are " + strings.Join(siblings, ", ")
}

func allKeys() []string {
	var keys []string
	for _, kv := range Keys() {
		keys = append(keys, kv[0])
	}
	return keys
}

var durationType = reflect.TypeOf(time.Duration(0))

func isSection(t reflect.Type) bool { return t.Kind() == reflect.Struct && t != durationType }

func isScalar(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int64, reflect.Float64:
		return true
	}
	return false
}

func scalarWants(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration like 30s or 5m"
	case t.Kind() == reflect.Bool:
		return "true or false"
	case t.Kind() == reflect.String:
		return "text"
	case t.Kind() == reflect.Float64:
		return "a number"
	}
	return "a whole number"
}

// nodeWhat names a YAML value for a message: the scalar quoted, or what
// kind of thing it is.
func nodeWhat(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a section of keys"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	return strconv.Quote(n.Value)
}

// decodeError rewrites what the YAML decoder says about a file that passed
// checkYAML (a syntax error, mostly) without its Go type names.
func decodeError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return errors.New(strings.Join(te.Errors, "; "))
	}
	return err
}
