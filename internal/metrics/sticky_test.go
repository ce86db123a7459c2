package metrics

import (
	"fmt"
	"maps"
	"strings"
	"testing"
)

// B63 and B64: applyStickyQueueLabels returns byLabel
// plus an explicit 0 for every label seen before and absent now, and
// remembers every current label; a drained label keeps reporting 0.
func TestApplyStickyQueueLabelsSeedExample(t *testing.T) {
	seen := map[string]bool{}
	steps := []struct {
		in, want map[string]int
	}{
		{map[string]int{"linux": 3, "macos": 2}, map[string]int{"linux": 3, "macos": 2}},
		{map[string]int{}, map[string]int{"linux": 0, "macos": 0}},
		{map[string]int{"linux": 1}, map[string]int{"linux": 1, "macos": 0}},
		{nil, map[string]int{"linux": 0, "macos": 0}},
		{map[string]int{"arm64": 4}, map[string]int{"linux": 0, "macos": 0, "arm64": 4}},
	}
	for i, s := range steps {
		got := applyStickyQueueLabels(seen, s.in)
		if !maps.Equal(got, s.want) {
			t.Fatalf("step %d: %v → %v, want %v", i+1, s.in, got, s.want)
		}
	}
	if len(seen) != 3 || !seen["linux"] || !seen["macos"] || !seen["arm64"] {
		t.Fatalf("everSeen = %v, want linux, macos, arm64", seen)
	}
}

// The input map is the caller's: the rule must not write into it.
func TestApplyStickyQueueLabelsLeavesItsInputAlone(t *testing.T) {
	seen := map[string]bool{"macos": true}
	in := map[string]int{"linux": 1}
	applyStickyQueueLabels(seen, in)
	if len(in) != 1 || in["linux"] != 1 {
		t.Fatalf("input changed: %v", in)
	}
}

func TestBoundLabelsFoldsLabelsPastTheLimit(t *testing.T) {
	seen := map[string]bool{}
	in := map[string]int{"a": 1, "b": 2, "c": 3, "d": 4}
	got := applyStickyQueueLabels(seen, boundLabels(in, seen, 2))
	want := map[string]int{"a": 1, "b": 2, OverflowLabel: 7}
	if !maps.Equal(got, want) {
		t.Fatalf("first refresh: %v, want %v", got, want)
	}
	// Seen labels keep their series; new ones still fold; the overflow
	// series is sticky like any label.
	got = applyStickyQueueLabels(seen, boundLabels(map[string]int{"b": 1, "e": 5}, seen, 2))
	want = map[string]int{"a": 0, "b": 1, OverflowLabel: 5}
	if !maps.Equal(got, want) {
		t.Fatalf("second refresh: %v, want %v", got, want)
	}
	got = applyStickyQueueLabels(seen, boundLabels(nil, seen, 2))
	want = map[string]int{"a": 0, "b": 0, OverflowLabel: 0}
	if !maps.Equal(got, want) {
		t.Fatalf("drained: %v, want %v", got, want)
	}
}

func TestBoundLabelsManyRefreshesStayBounded(t *testing.T) {
	seen := map[string]bool{}
	for i := range 100 {
		in := map[string]int{}
		for j := range 50 {
			in[fmt.Sprintf("label-%d-%d", i, j)] = 1
		}
		out := applyStickyQueueLabels(seen, boundLabels(in, seen, 20))
		if len(out) > 21 {
			t.Fatalf("refresh %d: %d series, want at most 21", i, len(out))
		}
		total := 0
		for _, n := range out {
			total += n
		}
		if total != 50 {
			t.Fatalf("refresh %d: %d jobs reported, want 50 (folding must not lose jobs)", i, total)
		}
	}
}

func TestUnknownWebhookEventsAreOther(t *testing.T) {
	for ev, want := range map[string]string{
		"push": "push", "pull_request": "pull_request", "ping": "ping", "dispatch": "dispatch",
		"issues": "other", "star": "other", "": "other", "push ": "other",
	} {
		if got := eventLabel(ev); got != want {
			t.Errorf("eventLabel(%q) = %q, want %q", ev, got, want)
		}
	}
}

// FuzzStickyBoundLabels checks the invariants of the per-label gauge over
// any sequence of refreshes: no job is lost by folding, the series stay
// within the bound (plus the overflow series), and every label once
// reported keeps a series.
func FuzzStickyBoundLabels(f *testing.F) {
	f.Add([]byte("linux=3,macos=2;;linux=1"), uint8(5))
	f.Add([]byte("a=1,b=2,c=3,d=4;b=1,e=5;"), uint8(2))
	f.Add([]byte(";;;x=9"), uint8(0))
	f.Fuzz(func(t *testing.T, script []byte, limit uint8) {
		seen := map[string]bool{}
		reported := map[string]bool{}
		for _, refresh := range strings.Split(string(script), ";") {
			in, total := map[string]int{}, 0
			for _, kv := range strings.Split(refresh, ",") {
				k, v, _ := strings.Cut(kv, "=")
				if k == "" {
					continue
				}
				n := 0
				for _, c := range v {
					n = (n*10 + int(c-'0')&15) % 1000
				}
				in[k] += n
				total += n
			}
			out := applyStickyQueueLabels(seen, boundLabels(in, seen, int(limit)))
			sum := 0
			for _, n := range out {
				sum += n
			}
			if sum != total {
				t.Fatalf("refresh %q: %d jobs reported, want %d", refresh, sum, total)
			}
			if len(out) > int(limit)+1 {
				t.Fatalf("refresh %q: %d series, limit %d", refresh, len(out), limit)
			}
			for l := range reported {
				if _, ok := out[l]; !ok {
					t.Fatalf("refresh %q: label %q lost its series", refresh, l)
				}
			}
			for l := range out {
				reported[l] = true
			}
		}
	})
}
