package scaler

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/kilnci/kiln"
)

// An unknown key of a scaler is an error naming it and the closest valid
// key; bad values name their key.
// Proves B166 (docs/behaviours.md).
func TestConfigStrictKeys(t *testing.T) {
	var cs []Config
	err := yaml.Unmarshal([]byte("- name: b\n  type: process\n  labels: [x]\n  max_agent: 4\n"), &cs)
	if err == nil || !strings.Contains(err.Error(), `unknown key "max_agent"`) || !strings.Contains(err.Error(), `did you mean "max_agents"?`) {
		t.Fatalf("error %v", err)
	}
	err = yaml.Unmarshal([]byte("- name: b\n  warm_pool: {sise: 2}\n"), &cs)
	if err == nil || !strings.Contains(err.Error(), `"sise"`) || !strings.Contains(err.Error(), `"size"`) {
		t.Fatalf("warm_pool error %v", err)
	}
	if err := yaml.Unmarshal([]byte("- name: b\n  type: process\n  labels: [x]\n  max_agents: 2\n  spawn_timeout: 30s\n"), &cs); err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].SpawnTimeout != 30*time.Second || cs[0].MaxAgents != 2 {
		t.Fatalf("decoded %+v", cs)
	}
	bad := []Config{{Name: "Bad Name", Type: "procss", MaxAgents: 0, ServerURL: "nope",
		DefaultResources: Resources{Memory: "lots"}, MandatoryLabels: kiln.Labels{"gpu"}, Labels: kiln.Labels{"x"}}}
	joined := errors.Join(Validate(bad, Caps{MaxAgents: 1, Memory: "2q"})...).Error()
	for _, want := range []string{"scalers[0] (Bad Name).name", `did you mean "process"?`, ".max_agents must be at least 1",
		".server_url", ".default_resources.memory", ".mandatory_labels", "scaler_caps.memory"} {
		if !strings.Contains(joined, want) {
			t.Errorf("validation lacks %q:\n%s", want, joined)
		}
	}
	if errs := Validate([]Config{{Name: "d", Type: "docker", Labels: kiln.Labels{"x"}, MaxAgents: 1}}, DefaultCaps()); len(errs) != 1 ||
		!strings.Contains(errs[0].Error(), "scalers[0] (d).image") {
		t.Fatalf("docker without an image: %v", errs)
	}
}

// Two scalers with the same labels are refused at start, naming both.
// Proves B167 (docs/behaviours.md).
func TestOverlappingScalersAreRefused(t *testing.T) {
	cs := []Config{
		{Name: "a", Type: "process", Labels: kiln.Labels{"linux", "big"}, MaxAgents: 1},
		{Name: "b", Type: "process", Labels: kiln.Labels{"BIG", "linux"}, MaxAgents: 1},
		{Name: "c", Type: "process", Labels: kiln.Labels{"linux"}, MaxAgents: 1},
	}
	errs := Validate(cs, DefaultCaps())
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "scalers a and b have the same labels (big,linux)") {
		t.Fatalf("errors %v", errs)
	}
}

// The scaler chosen for a job is the one whose labels include all the job
// asks for, with the smallest label set (the first on a tie); mandatory
// labels must be asked for, excluded ones must not; retiring scalers are
// never chosen.
// Proves B168 (docs/behaviours.md).
func TestMatchPicksTheSmallestServingLabelSet(t *testing.T) {
	cs := []Config{
		{Name: "big", Type: "event", Labels: kiln.NewLabels("linux", "docker", "big")},
		{Name: "small", Type: "event", Labels: kiln.NewLabels("linux", "docker")},
		{Name: "gpu", Type: "event", Labels: kiln.NewLabels("linux", "gpu"), MandatoryLabels: kiln.NewLabels("gpu")},
		{Name: "nofork", Type: "event", Labels: kiln.NewLabels("linux", "secrets"), ExcludeLabels: kiln.NewLabels("untrusted")},
	}
	none := func(string) bool { return false }
	for _, tc := range []struct {
		runsOn []string
		want   string
	}{
		{[]string{"docker"}, "small"}, {[]string{"big"}, "big"}, {[]string{"linux"}, "small"},
		{[]string{"gpu"}, "gpu"}, {[]string{"secrets"}, "nofork"}, {[]string{"untrusted", "secrets"}, ""}, {[]string{"macos"}, ""},
	} {
		i := match(cs, none, kiln.Requirement{RunsOn: kiln.NewLabels(tc.runsOn...)})
		got := ""
		if i >= 0 {
			got = cs[i].Name
		}
		if got != tc.want {
			t.Errorf("runs_on %v: scaler %q, want %q", tc.runsOn, got, tc.want)
		}
	}
	if i := match(cs, func(n string) bool { return n == "small" }, kiln.Requirement{RunsOn: kiln.NewLabels("docker")}); i != 0 {
		t.Errorf("with small retiring: %d, want big", i)
	}
}

// After n consecutive failures a scaler waits 30 s doubling, at most 15 min.
// Proves B173 (docs/behaviours.md).
func TestBackoffDoublesToFifteenMinutes(t *testing.T) {
	want := []time.Duration{0, 30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 15 * time.Minute, 15 * time.Minute}
	for n, w := range want {
		if got := BackoffFor(n); got != w {
			t.Errorf("BackoffFor(%d) = %s, want %s", n, got, w)
		}
	}
	if BackoffFor(100) != BackoffMax {
		t.Error("no cap")
	}
}

// The capture keeps the last 50 lines, oldest first, "" when nothing was
// written; a failure carries them under a marker, or is bare.
// Proves B177 (docs/behaviours.md).
func TestCaptureTail(t *testing.T) {
	c := &Capture{}
	if c.Tail() != "" || WithTail("boom", "") != "boom" {
		t.Fatal("empty capture")
	}
	for i := 1; i <= 60; i++ {
		_, _ = c.Write([]byte("line " + itoa(i) + "\n"))
	}
	_, _ = c.Write([]byte("partial"))
	lines := strings.Split(c.Tail(), "\n")
	if len(lines) != TailLines || lines[0] != "line 12" || lines[48] != "line 60" || lines[49] != "partial" {
		t.Fatalf("tail %d lines: %q … %q", len(lines), lines[0], lines[len(lines)-1])
	}
	if got := WithTail("agent process error: x", "a\nb"); got != "agent process error: x\n--- captured output (last 50 lines) ---\na\nb" {
		t.Fatalf("%q", got)
	}
}

func itoa(i int) string {
	return strings.TrimLeft(strings.Repeat("0", 3)+string(rune('0'+i/10))+string(rune('0'+i%10)), "0")
}
