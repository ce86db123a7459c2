package trigger

import (
	"encoding/json"
	"maps"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/workflow"
)

const inputsOn = `{dispatch: {inputs: {
  target: {type: choice, options: [staging, production], default: staging},
  dry_run: {type: boolean, default: true},
  replicas: {type: number},
  note: {required: true},
  mode: {type: choice, options: [fast, slow]},
  label: {}}}}`

func TestCoerceInputs(t *testing.T) {
	d := wf(t, inputsOn).On.Dispatch
	cases := []struct {
		name  string
		given map[string]any
		want  map[string]any
	}{
		{"defaults and empty values", map[string]any{"note": "hi"},
			map[string]any{"target": "staging", "dry_run": true, "replicas": 0.0, "note": "hi", "mode": "fast", "label": ""}},
		{"strings coerced by type", map[string]any{"note": "x", "dry_run": "FALSE", "replicas": "3", "target": "production"},
			map[string]any{"target": "production", "dry_run": false, "replicas": 3.0, "note": "x", "mode": "fast", "label": ""}},
		{"native JSON types", map[string]any{"note": "x", "dry_run": false, "replicas": json.Number("2.5")},
			map[string]any{"target": "staging", "dry_run": false, "replicas": 2.5, "note": "x", "mode": "fast", "label": ""}},
	}
	for _, c := range cases {
		got, err := CoerceInputs(d, c.given)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("%s:\n got %v\nwant %v", c.name, got, c.want)
		}
	}
}

// Proves B6 (docs/behaviours.md).
func TestCoerceInputsErrors(t *testing.T) {
	d := wf(t, inputsOn).On.Dispatch
	cases := []struct {
		name  string
		given map[string]any
		want  []string
	}{
		{"missing required", map[string]any{}, []string{`input "note" is required`}},
		{"unknown", map[string]any{"note": "x", "colour": "red"}, []string{`unknown input "colour": the workflow declares target, dry_run, replicas, note, mode, label`}},
		{"not an option", map[string]any{"note": "x", "target": "prod"}, []string{`input "target" must be one of staging, production, not "prod"`}},
		{"bad boolean", map[string]any{"note": "x", "dry_run": "yes"}, []string{`input "dry_run" must be true or false, not "yes"`}},
		{"bad number", map[string]any{"note": "x", "replicas": "many"}, []string{`input "replicas" must be a number, not "many"`}},
		{"nan", map[string]any{"note": "x", "replicas": "NaN"}, []string{`input "replicas" must be a number`}},
		{"wrong type", map[string]any{"note": 5.0}, []string{`input "note" must be a string, not 5`}},
		{"too long", map[string]any{"note": strings.Repeat("x", MaxInputLen+1)}, []string{`input "note" is longer than 4096 bytes`}},
		{"all at once", map[string]any{"zzz": 1, "dry_run": 2}, []string{`unknown input "zzz"`, `input "dry_run" must be true or false, not 2`, `input "note" is required`}},
	}
	for _, c := range cases {
		_, err := CoerceInputs(d, c.given)
		if kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Errorf("%s: err = %v", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", c.name, err, w)
			}
		}
	}
}

func TestCoerceInputsWithoutDispatch(t *testing.T) {
	if got, err := CoerceInputs(nil, nil); err != nil || len(got) != 0 {
		t.Fatalf("nil trigger: %v %v", got, err)
	}
	if _, err := CoerceInputs(&workflow.DispatchTrigger{}, map[string]any{"a": "b"}); err == nil || !strings.Contains(err.Error(), "declares no inputs") {
		t.Fatalf("err = %v", err)
	}
}

func TestNoTriggersNeverMatch(t *testing.T) {
	d := Match(&workflow.Workflow{Name: "empty"}, &kiln.Event{Name: kiln.EventPush})
	if d.Matched || !strings.Contains(d.Summary, "no triggers") {
		t.Fatalf("decision = %+v", d)
	}
}
