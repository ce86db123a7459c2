package workflow

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every complete workflow shown in docs/workflow.md is valid, and the
// matrix children the page lists are the ones kiln makes.
func TestDocsExamplesAreValid(t *testing.T) {
	doc, err := os.ReadFile("../../docs/workflow.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	checked := 0
	for _, b := range blocks {
		src := b[1]
		if !strings.Contains(src, "jobs:") || !regexp.MustCompile(`(?m)^on:`).MatchString(src) {
			continue
		}
		checked++
		w, err := Parse("docs.yml", []byte(src))
		if err != nil {
			t.Errorf("example does not parse:\n%s\n%v", src, err)
			continue
		}
		if j := w.Job("test"); j != nil && j.Matrix != nil && strings.Contains(src, "windows") {
			for _, v := range j.Variants {
				if !strings.Contains(string(doc), "- `"+v.Name+"`") {
					t.Errorf("docs do not list child %q", v.Name)
				}
			}
		}
	}
	if checked < 3 {
		t.Fatalf("only %d examples found", checked)
	}
}
