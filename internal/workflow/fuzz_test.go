package workflow

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds arbitrary bytes to the YAML front end and the validator.
// Parse must never panic; it returns either a plan whose invariants hold or
// an ErrorList of positioned errors. Seeds: the example workflows and the
// corpus under testdata/fuzz/FuzzParse.
// Proves B74 (docs/behaviours.md).
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/plans/*.yml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("on: push\njobs: {a: {steps: [{run: x}]}}\n"))
	f.Add([]byte("a: &a [1]\nb: *a\n"))
	f.Add([]byte("on: [push]\njobs:\n\ta: {}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := Parse("f.yml", data)
		if err != nil {
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 || w != nil {
				t.Fatalf("err = %v (%T), w = %v", err, err, w)
			}
			for _, e := range list {
				if e.Line < 1 || e.Col < 1 || e.Msg == "" || e.File != "f.yml" {
					t.Fatalf("bad error %+v", e)
				}
			}
			return
		}
		if len(w.On.Order) == 0 || len(w.Jobs) == 0 {
			t.Fatalf("valid plan without triggers or jobs")
		}
		for _, j := range w.Jobs {
			if len(j.Variants) == 0 || len(j.Variants) > MaxMatrixChildren || len(j.Steps) == 0 {
				t.Fatalf("job %s: %d variants, %d steps", j.ID, len(j.Variants), len(j.Steps))
			}
			for _, n := range j.Needs {
				if w.Job(n.Job) == nil || n.Job == j.ID || len(n.When) == 0 {
					t.Fatalf("job %s: bad need %+v", j.ID, n)
				}
			}
		}
		if _, err := json.Marshal(w); err != nil {
			t.Fatalf("plan does not marshal: %v", err)
		}
	})
}
