package scaler

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// A spawn that fails while a demand pass is under way frees its job for
// that pass's read of the queue; the pass, past its own backoff check,
// must still not start a second agent for the job at once: the backoff is
// checked again where the spawn books its resources.
// Proves B173 (docs/behaviours.md).
func TestSpawnDuringABackoffIsRefused(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		backend := &sizes{}
		m, err := NewManager(db, ManagerConfig{
			Scalers:  []Config{{Name: "b", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 2}},
			Instance: "server-1", Backends: map[string]Backend{"process": backend},
		})
		if err != nil {
			t.Fatal(err)
		}
		m.SetFleet(busyFleet{})
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); m.shutdown() })
		cr, err := db.Runs().Create(ctx, store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main",
			SHA: "abc", Event: json.RawMessage(`{"name":"push"}`), Jobs: []store.NewJob{
				{Name: "one", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("scaled")}, Spec: json.RawMessage(`{}`), Steps: []string{"s"}},
			}})
		if err != nil {
			t.Fatal(err)
		}
		// The pass checked the backoff (none) and read the job; a failure
		// then sets one, as fail does.
		m.mu.Lock()
		m.state["b"].failures = 1
		m.state["b"].deferUntil = m.now().Add(time.Minute)
		m.mu.Unlock()
		if err := m.spawn(ctx, m.scalers[0], cr.Jobs["one"], cr.ID, kiln.Resources{}); err != errNoRoom {
			t.Fatalf("spawn during the backoff: %v, want errNoRoom", err)
		}
		if got := backend.got(); len(got) != 0 {
			t.Fatalf("the backend was asked for %d agents during the backoff", len(got))
		}
	})
}
