package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/plans")

// TestGoldenPlans parses every example under testdata/plans and compares
// the normalized plan (X.golden.json) or the error report (X.errors.golden)
// with the committed golden file. Run with -update to rewrite them.
func TestGoldenPlans(t *testing.T) {
	files, err := filepath.Glob("testdata/plans/*.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			base := strings.TrimSuffix(file, ".yml")
			w, perr := Parse(filepath.ToSlash(file), data)
			var got []byte
			var golden string
			if perr != nil {
				var list ErrorList
				if !errors.As(perr, &list) {
					t.Fatalf("error is %T, not an ErrorList", perr)
				}
				got, golden = []byte(list.Error()+"\n"), base+".errors.golden"
			} else {
				got, err = json.MarshalIndent(w, "", "  ")
				if err != nil {
					t.Fatal(err)
				}
				got, golden = append(got, '\n'), base+".golden.json"
			}
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the parse result (run go test -update and review the diff):\n%s", golden, got)
			}
		})
	}
}

// The examples that must parse cleanly do, and those that must fail do.
func TestGoldenExamplesOutcome(t *testing.T) {
	for file, wantOK := range map[string]bool{"full.yml": true, "minimal.yml": true, "matrix.yml": true, "workflow-md.yml": false, "broken.yml": false} {
		data, err := os.ReadFile(filepath.Join("testdata/plans", file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(file, data); (err == nil) != wantOK {
			t.Errorf("%s: err = %v, want ok=%v", file, err, wantOK)
		}
	}
}
