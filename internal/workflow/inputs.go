package workflow

import (
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// DispatchTrigger allows manual runs (from the CLI, the API or the
// dashboard) with typed inputs. trigger.CoerceInputs validates a request's
// inputs against it.
type DispatchTrigger struct {
	Inputs []*Input // in the order written
}

// Input returns the declared input called name, or nil.
func (d *DispatchTrigger) Input(name string) *Input {
	for _, in := range d.Inputs {
		if in.Name == name {
			return in
		}
	}
	return nil
}

// InputType is the type of a dispatch input.
type InputType string

const (
	InputString  InputType = "string"
	InputChoice  InputType = "choice"  // a string among Options
	InputBoolean InputType = "boolean" // true or false
	InputNumber  InputType = "number"  // a float64
)

var inputTypes = []string{string(InputString), string(InputChoice), string(InputBoolean), string(InputNumber)}

// Input is one declared dispatch input.
type Input struct {
	Name        string
	Type        InputType // default string
	Options     []string  // choice only
	Default     any       // nil, or a value of Type: string, bool or float64
	Required    bool      // a run must give it (when it has no default)
	Description string
}

// MaxInputs bounds the inputs of a dispatch trigger.
const MaxInputs = 50

func (p *parser) parseDispatch(n *yaml.Node) (*DispatchTrigger, bool) {
	pairs, ok := p.mapping(n, "the dispatch trigger")
	f := p.fields(pairs, "the dispatch trigger", dispatchKeys)
	d := &DispatchTrigger{}
	pr, has := f["inputs"]
	if !has {
		return d, ok
	}
	inputs, good := p.mapping(pr.v, "dispatch inputs")
	if !good {
		return d, false
	}
	if len(inputs) > MaxInputs {
		p.errorf(pr.v, "on.dispatch.inputs: %d inputs; at most %d", len(inputs), MaxInputs)
		return d, false
	}
	for _, in := range inputs {
		if msg := idProblem(in.key, "input name"); msg != "" {
			p.errorf(in.k, "on.dispatch.inputs: %s", msg)
			continue
		}
		if input := p.parseInput(in); input != nil {
			d.Inputs = append(d.Inputs, input)
		}
	}
	return d, ok
}

func (p *parser) parseInput(in pair) *Input {
	what := "input " + strconv.Quote(in.key)
	pairs, ok := p.mapping(in.v, what)
	if !ok {
		return nil
	}
	f := p.fields(pairs, what, inputKeys)
	input := &Input{Name: in.key, Type: InputString}
	if t, has := f["type"]; has {
		s, good := p.str(t.v, "type")
		if good && !slices.Contains(inputTypes, s) {
			p.errorf(t.v, "%s: unknown type %q; types are %s%s", what, s, strings.Join(inputTypes, ", "), didYouMean(s, inputTypes))
			return nil
		}
		input.Type = InputType(s)
	}
	if o, has := f["options"]; has {
		if input.Type != InputChoice {
			p.errorf(o.k, "%s: only a choice input has options", what)
		}
		items, _ := p.strList(o.v, "options")
		for _, it := range items {
			if slices.Contains(input.Options, it.Value) {
				p.errorf(it, "%s: option %q is listed twice", what, it.Value)
				continue
			}
			input.Options = append(input.Options, it.Value)
		}
	}
	if input.Type == InputChoice && len(input.Options) == 0 {
		p.errorf(in.k, "%s: a choice input needs options: [a, b, …]", what)
	}
	if r, has := f["required"]; has {
		input.Required, _ = p.boolean(r.v, "required")
	}
	if d, has := f["description"]; has {
		input.Description, _ = p.str(d.v, "description")
	}
	if d, has := f["default"]; has && !isNull(d.v) {
		input.Default = p.inputDefault(input, d.v, what)
	}
	return input
}

// inputDefault checks a default against its input's type.
func (p *parser) inputDefault(in *Input, n *yaml.Node, what string) any {
	if n.Kind != yaml.ScalarNode {
		p.errorf(n, "%s: the default must be a single value, not %s", what, describe(n))
		return nil
	}
	switch in.Type {
	case InputBoolean:
		b, _ := p.boolean(n, what+" default")
		return b
	case InputNumber:
		if n.Tag != "!!int" && n.Tag != "!!float" {
			p.errorf(n, "%s: the default must be a number, not %s", what, describe(n))
			return nil
		}
		v, err := ParseNumber(n.Value)
		if err != nil {
			p.errorf(n, "%s: %s", what, err)
			return nil
		}
		return v
	case InputChoice:
		if len(in.Options) > 0 && !slices.Contains(in.Options, n.Value) {
			p.errorf(n, "%s: the default %q is not one of the options (%s)", what, n.Value, strings.Join(in.Options, ", "))
			return nil
		}
	}
	return n.Value
}

// ParseNumber reads a number input: a finite decimal (YAML spellings such as
// 1_000 or 0x10 included).
func ParseNumber(s string) (float64, error) {
	s = strings.ReplaceAll(strings.TrimSpace(s), "_", "")
	if i, err := strconv.ParseInt(s, 0, 64); err == nil {
		return float64(i), nil
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v != v || v > 1e300 || v < -1e300 {
		return 0, errNotNumber(s)
	}
	return v, nil
}

type errNotNumber string

func (e errNotNumber) Error() string { return strconv.Quote(string(e)) + " is not a number" }
