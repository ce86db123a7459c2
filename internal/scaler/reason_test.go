package scaler

import (
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// A job whose agent is still starting reads "spawning an agent", even when
// that agent fills the scaler; "at capacity" is for a scaler whose agents
// have all registered. Found by hand: a micro-VM's job read "at capacity
// (scaler vms: 1 of 1 agents)" for the 4 s its own VM booted.
// Proves B266 (docs/behaviours.md).
func TestReasonSaysSpawningWhileTheScalersAgentsStart(t *testing.T) {
	m, _ := newTestManager(t) // scaler "b", labels [scaled], max_agents 2
	req := kiln.Requirement{RunsOn: kiln.Labels{"scaled"}}
	reason := func() string {
		t.Helper()
		r, ok := m.Reason(req)
		if !ok {
			t.Fatal("the scaler does not serve [scaled]")
		}
		return r
	}
	if r := reason(); !strings.HasPrefix(r, store.ReasonSpawning+" (scaler b") {
		t.Fatalf("empty scaler: reason %q", r)
	}
	m.add(&managed{id: "a1", scaler: "b", backend: "process", jobID: "J1", runID: "R1", state: store.SpawnSpawning})
	m.add(&managed{id: "a2", scaler: "b", backend: "process", jobID: "J2", runID: "R1", state: store.SpawnSpawning})
	if r := reason(); !strings.HasPrefix(r, store.ReasonSpawning+" (scaler b") {
		t.Fatalf("full of starting agents: reason %q, want spawning", r)
	}
	m.mu.Lock()
	m.agents["a1"].state = store.SpawnRunning
	m.mu.Unlock()
	if r := reason(); !strings.HasPrefix(r, store.ReasonSpawning) {
		t.Fatalf("one still starting: reason %q, want spawning", r)
	}
	m.mu.Lock()
	m.agents["a2"].state = store.SpawnRunning
	m.mu.Unlock()
	if r, want := reason(), "at capacity (scaler b: 2 of 2 agents)"; r != want {
		t.Fatalf("all registered: reason %q, want %q", r, want)
	}
}
