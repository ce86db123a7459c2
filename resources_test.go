package kiln

import "testing"

// A job's resources are part of its routing key (jobs asking for
// different amounts queue apart) and survive the round trip, with and
// without a fork part; an agent with a limit accepts only jobs within it.
// Proves B196 (docs/behaviours.md).
func TestRequirementResources(t *testing.T) {
	r := Requirement{RunsOn: NewLabels("linux"), Exclude: NewLabels("gpu"), Resources: Resources{MilliCPUs: 2000, Memory: 4 << 30},
		Fork: true, ForkLabels: NewLabels("pr")}
	if r.Key() != "linux!gpu res:2000m,4294967296 fork:pr" {
		t.Fatalf("key = %q", r.Key())
	}
	back := ParseRequirementKey(r.Key())
	if back.Resources != r.Resources || back.Key() != r.Key() || !back.Fork || back.Exclude.Key() != "gpu" {
		t.Fatalf("round trip: %+v", back)
	}
	plain := Requirement{RunsOn: NewLabels("linux")}
	if plain.Key() != "linux" || ParseRequirementKey("linux").Resources != (Resources{}) {
		t.Fatalf("a job without resources keeps its old key: %q", plain.Key())
	}
	small := AgentLabels{Labels: NewLabels("linux"), Limit: Resources{MilliCPUs: 1000, Memory: 1 << 30}}
	if small.Accepts(Requirement{RunsOn: NewLabels("linux"), Resources: Resources{MilliCPUs: 2000}}) {
		t.Fatal("a 1-CPU agent accepted a 2-CPU job")
	}
	if got := small.Explain(Requirement{RunsOn: NewLabels("linux"), Resources: Resources{Memory: 2 << 30}}); got != "was given 1 CPUs, 1 GiB, less than the job's 2 GiB" {
		t.Fatalf("explain = %q", got)
	}
	if !small.Accepts(Requirement{RunsOn: NewLabels("linux"), Resources: Resources{MilliCPUs: 500}}) || !small.Accepts(plain) {
		t.Fatal("a 1-CPU agent refused a job within it")
	}
	if !(AgentLabels{Labels: NewLabels("linux")}).Accepts(Requirement{RunsOn: NewLabels("linux"), Resources: Resources{MilliCPUs: 64000}}) {
		t.Fatal("an agent without a limit refused a job with resources")
	}
}

func TestParseResourceAmounts(t *testing.T) {
	mem := map[string]int64{"512m": 512 << 20, "4g": 4 << 30, "4G": 4 << 30, "4Gi": 4 << 30, "4GiB": 4 << 30, "4gb": 4 << 30,
		"1.5g": 3 << 29, "1024k": 1 << 20, "1t": 1 << 40, "2048": 2048, " 2 g ": 2 << 30}
	for in, want := range mem {
		if got, err := ParseMemory(in); err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "4x", "-1g", "0", "0.1", "4i", "1e3g", "g", "2p", "NaNg", "0x10m"} {
		if _, err := ParseMemory(bad); err == nil {
			t.Errorf("ParseMemory(%q) succeeded", bad)
		}
	}
	cpus := map[string]int64{"2": 2000, "0.5": 500, "500m": 500, "1m": 1, "64": 64000}
	for in, want := range cpus {
		if got, err := ParseCPUs(in); err != nil || got != want {
			t.Errorf("ParseCPUs(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "two", "0", "0.0001", "-1", "0.5m", "NaN", "2g"} {
		if _, err := ParseCPUs(bad); err == nil {
			t.Errorf("ParseCPUs(%q) succeeded", bad)
		}
	}
	if got := (Resources{MilliCPUs: 1500, Memory: 1536 << 20}).String(); got != "1.5 CPUs, 1.5 GiB" {
		t.Errorf("String = %q", got)
	}
}
