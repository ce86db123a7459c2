package kiln

import (
	"strings"
	"testing"
)

func TestNewLabelsCanonical(t *testing.T) {
	got := NewLabels(" Linux", "amd64", "", "linux", "GPU")
	if got.Key() != "amd64,gpu,linux" {
		t.Fatalf("key = %q", got.Key())
	}
	if !ParseLabelsKey(got.Key()).Contains(got) || len(ParseLabelsKey("")) != 0 {
		t.Fatal("ParseLabelsKey does not invert Key")
	}
}

func TestRequirementKeyRoundTrip(t *testing.T) {
	r := Requirement{RunsOn: NewLabels("linux", "amd64"), Exclude: NewLabels("gpu")}
	if r.Key() != "amd64,linux!gpu" {
		t.Fatalf("key = %q", r.Key())
	}
	back := ParseRequirementKey(r.Key())
	if back.Key() != r.Key() {
		t.Fatalf("round trip: %q", back.Key())
	}
	if (Requirement{}).Key() != "" {
		t.Fatal("empty requirement has a key")
	}
}

// Proves B28 (docs/behaviours.md).
func TestAgentAccepts(t *testing.T) {
	plain := AgentLabels{Labels: NewLabels("linux", "amd64", "local")}
	gpu := AgentLabels{Labels: NewLabels("linux", "amd64", "gpu"), Mandatory: NewLabels("gpu")}
	cases := []struct {
		name  string
		agent AgentLabels
		req   Requirement
		ok    bool
	}{
		{"no labels", plain, Requirement{}, true},
		{"subset", plain, Requirement{RunsOn: NewLabels("linux")}, true},
		{"missing", plain, Requirement{RunsOn: NewLabels("linux", "arm64")}, false},
		{"excluded", gpu, Requirement{RunsOn: NewLabels("linux"), Exclude: NewLabels("gpu")}, false},
		{"mandatory not asked", gpu, Requirement{RunsOn: NewLabels("linux")}, false},
		{"mandatory asked", gpu, Requirement{RunsOn: NewLabels("linux", "gpu")}, true},
		{"no labels on tainted agent", gpu, Requirement{}, false},
	}
	for _, c := range cases {
		if got := c.agent.Accepts(c.req); got != c.ok {
			t.Errorf("%s: Accepts = %v, want %v", c.name, got, c.ok)
		}
		if (c.agent.Explain(c.req) == "") != c.ok {
			t.Errorf("%s: Explain = %q disagrees with Accepts", c.name, c.agent.Explain(c.req))
		}
	}
}

func TestValidateLabels(t *testing.T) {
	if err := ValidateLabels([]string{"linux", "kiln:os=linux"}); err != nil {
		t.Fatal(err)
	}
	bad := [][]string{{"a,b"}, {"has space"}, {strings.Repeat("x", 200)}, make([]string, 100)}
	for _, b := range bad {
		if err := ValidateLabels(b); ErrorCode(err) != CodeInvalid {
			t.Errorf("%q: err = %v", b, err)
		}
	}
}
