package trigger

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/workflow"
)

// MaxInputLen bounds one string input of a manual run.
const MaxInputLen = 4096

// CoerceInputs validates the inputs of a manual run against a dispatch
// trigger and returns the complete `inputs` context: every declared input,
// with its type's Go value (string, bool or float64).
//
// Strings are coerced by type ("true"/"false" for booleans, "3" or "1.5"
// for numbers), so the CLI can pass everything as text. An input that is
// not given takes its default; without a default it is an error when
// required, else the empty value of its type ("", false, 0; a choice's
// first option). Unknown inputs, values of the wrong type and values not
// among a choice's options are errors naming the input; all problems are
// reported together, as a kiln.Error with code invalid.
func CoerceInputs(d *workflow.DispatchTrigger, given map[string]any) (map[string]any, error) {
	out := map[string]any{}
	var problems []string
	var declared []string
	if d != nil {
		for _, in := range d.Inputs {
			declared = append(declared, in.Name)
		}
	}
	for _, name := range sortedKeys(given) {
		if !slices.Contains(declared, name) {
			problems = append(problems, unknownInput(name, declared))
		}
	}
	if d != nil {
		for _, in := range d.Inputs {
			v, err := coerceInput(in, given[in.Name])
			if err != nil {
				problems = append(problems, err.Error())
				continue
			}
			out[in.Name] = v
		}
	}
	if len(problems) > 0 {
		return nil, kiln.Errorf(kiln.CodeInvalid, "%s", strings.Join(problems, "; "))
	}
	return out, nil
}

func unknownInput(name string, declared []string) string {
	if len(declared) == 0 {
		return fmt.Sprintf("unknown input %q: the workflow declares no inputs", name)
	}
	return fmt.Sprintf("unknown input %q: the workflow declares %s", name, strings.Join(declared, ", "))
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// coerceInput returns the value of one declared input.
func coerceInput(in *workflow.Input, v any) (any, error) {
	if v == nil {
		switch {
		case in.Default != nil:
			return in.Default, nil
		case in.Required:
			return nil, fmt.Errorf("input %q is required", in.Name)
		}
		return emptyValue(in), nil
	}
	switch in.Type {
	case workflow.InputBoolean:
		switch x := v.(type) {
		case bool:
			return x, nil
		case string:
			switch strings.ToLower(strings.TrimSpace(x)) {
			case "true":
				return true, nil
			case "false":
				return false, nil
			}
		}
		return nil, fmt.Errorf("input %q must be true or false, not %s", in.Name, show(v))
	case workflow.InputNumber:
		f, ok := toNumber(v)
		if !ok {
			return nil, fmt.Errorf("input %q must be a number, not %s", in.Name, show(v))
		}
		return f, nil
	default: // string, choice
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("input %q must be a string, not %s", in.Name, show(v))
		}
		if len(s) > MaxInputLen {
			return nil, fmt.Errorf("input %q is longer than %d bytes", in.Name, MaxInputLen)
		}
		if in.Type == workflow.InputChoice && !slices.Contains(in.Options, s) {
			return nil, fmt.Errorf("input %q must be one of %s, not %q", in.Name, strings.Join(in.Options, ", "), s)
		}
		return s, nil
	}
}

func emptyValue(in *workflow.Input) any {
	switch in.Type {
	case workflow.InputBoolean:
		return false
	case workflow.InputNumber:
		return 0.0
	case workflow.InputChoice:
		if len(in.Options) > 0 {
			return in.Options[0]
		}
	}
	return ""
}

// toNumber accepts Go and JSON numbers and numeric strings; never NaN or ±Inf.
func toNumber(v any) (float64, bool) {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case float32:
		f = float64(x)
	case int:
		f = float64(x)
	case int64:
		f = float64(x)
	case json.Number:
		var err error
		if f, err = x.Float64(); err != nil {
			return 0, false
		}
	case string:
		var err error
		if f, err = workflow.ParseNumber(x); err != nil {
			return 0, false
		}
	default:
		return 0, false
	}
	return f, !math.IsNaN(f) && !math.IsInf(f, 0)
}

// show describes a wrong value briefly.
func show(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return strconv.Quote(x)
	case bool, float64, int, int64, json.Number:
		return fmt.Sprintf("%v", x)
	}
	return fmt.Sprintf("a %T", v)
}
