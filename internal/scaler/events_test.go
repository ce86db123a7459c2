package scaler

import (
	"context"
	"slices"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store/storetest"
)

type failure struct {
	backend string
	bound   bool
}

func newTestManager(t *testing.T) (*Manager, *[]failure) {
	t.Helper()
	db := storetest.New(t)
	var fails []failure
	m, err := NewManager(db, ManagerConfig{
		Scalers:  []Config{{Name: "b", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 2}},
		Instance: "server-1", Backends: map[string]Backend{"process": &Process{}},
		Hooks: Hooks{SpawnFailed: func(backend string, bound bool) { fails = append(fails, failure{backend, bound}) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	return m, &fails
}

func (m *Manager) add(a *managed) {
	a.registered = make(chan struct{})
	m.mu.Lock()
	m.agents[a.id] = a
	m.mu.Unlock()
}

func (m *Manager) timeline(t *testing.T, run string) []string {
	t.Helper()
	evs, err := m.db.Runs().Timeline(context.Background(), run, "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, e.JobID+" "+e.Type+" "+e.Detail)
	}
	return out
}

// Scaler events go to the job the agent was started for; once it took a
// job, to that job (it wins); a warm-pool agent's failure goes to no job
// but is counted unbound; every failure is counted under the backend of
// the agent, "unknown" for an agent the manager does not know; an event of
// another type is dropped.
// Proves B174, B176, B178 (docs/behaviours.md).
func TestEventsAreAttributedAndCounted(t *testing.T) {
	m, fails := newTestManager(t)
	m.add(&managed{id: "a1", scaler: "b", backend: "process", jobID: "J1", runID: "R1", state: "spawning"})
	m.add(&managed{id: "w", scaler: "b", backend: "process", warm: true, state: "spawning"})
	m.Event("a1", EventProvisioning, "starting")
	m.Event("a1", EventFailed, "agent process error: spawn ENOENT")
	m.Took("a1", "R2", "J2")
	m.Event("a1", EventFailed, "late")
	m.Event("w", EventFailed, "warm broke")
	m.Event("nobody", EventFailed, "who")
	m.Event("a1", "scaler.bogus", "dropped")
	if got := m.timeline(t, "R1"); !slices.Equal(got, []string{"J1 scaler.provisioning starting", "J1 scaler.failed agent process error: spawn ENOENT"}) {
		t.Fatalf("R1 timeline %q", got)
	}
	if got := m.timeline(t, "R2"); !slices.Equal(got, []string{"J2 scaler.failed late"}) {
		t.Fatalf("R2 timeline %q", got)
	}
	want := []failure{{"process", true}, {"process", true}, {"process", false}, {"unknown", false}}
	if !slices.Equal(*fails, want) {
		t.Fatalf("failures counted %v, want %v", *fails, want)
	}
}

// Events about an agent that names no job yet wait, in order, and follow
// it to the job it takes.
// Proves B175, B178 (docs/behaviours.md).
func TestUnattributedEventsFlushInOrderOnCorrelation(t *testing.T) {
	m, _ := newTestManager(t)
	m.add(&managed{id: "a3", scaler: "b", backend: "process", state: "spawning"})
	m.Event("a3", EventProvisioning, "p1")
	m.Event("a3", EventReady, "p2")
	if got := m.timeline(t, "R3"); len(got) != 0 {
		t.Fatalf("recorded before correlation: %q", got)
	}
	m.Took("a3", "R3", "J3")
	m.Event("a3", EventConnecting, "p3")
	want := []string{"J3 scaler.provisioning p1", "J3 scaler.ready p2", "J3 agent.connecting p3"}
	if got := m.timeline(t, "R3"); !slices.Equal(got, want) {
		t.Fatalf("timeline %q, want %q", got, want)
	}
	if !ValidEventType(EventFailed) || ValidEventType("scaler.exploded") {
		t.Fatal("event types")
	}
}
