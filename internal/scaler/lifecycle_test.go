package scaler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// recorded is an instance that records how it was removed.
type recorded struct {
	mu      sync.Mutex
	reasons []string
	exited  chan struct{}
}

func (r *recorded) Exited() <-chan struct{} { return r.exited }
func (r *recorded) ExitErr() error          { return nil }
func (r *recorded) Tail() string            { return "" }
func (r *recorded) Destroy(_ context.Context, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reasons = append(r.reasons, reason)
	return nil
}

func (r *recorded) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.reasons...)
}

// idleFleet says every agent is busy, so the manager drains nothing.
type idleFleet struct{}

func (idleFleet) IdleAccepting(kiln.Requirement) bool { return true }
func (idleFleet) Idle(string) bool                    { return false }
func (idleFleet) Drain(string) error                  { return nil }
func (idleFleet) RefreshReasons()                     {}

// A scaler's agent that disconnects holding no job is removed at once, the
// disconnect's reason handed to its backend; one that disconnects during
// its job is kept for the recovery window, removed once the window is over
// unless it registered again.
// Proves B183, B184 (docs/behaviours.md).
func TestDisconnectReasonReachesTheBackendAndLostAgentsWaitTheWindow(t *testing.T) {
	clock := storetest.NewClock()
	db := storetest.New(t, storetest.WithClock(clock.Now))
	m, err := NewManager(db, ManagerConfig{
		Scalers:  []Config{{Name: "b", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 4}},
		Instance: "server-1", Backends: map[string]Backend{"process": &Process{}}, RecoveryWindow: time.Minute,
		Clock: clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	m.SetFleet(idleFleet{})
	ctx := context.Background()
	agent := func(id string) *recorded {
		inst := &recorded{exited: make(chan struct{})}
		if ok, err := db.Scalers().Claim(ctx, store.Spawn{AgentID: id, Scaler: "b", Owner: "server-1"}); !ok || err != nil {
			t.Fatalf("claim %s: %v %v", id, ok, err)
		}
		m.add(&managed{id: id, scaler: "b", backend: "process", inst: inst, state: store.SpawnSpawning})
		if _, eph, _ := m.Registered(id); !eph {
			t.Fatalf("%s is not a scaler's agent", id)
		}
		return inst
	}
	done, lost, back := agent("scaler-process-done"), agent("scaler-process-lost"), agent("scaler-process-back")

	m.Gone("scaler-process-done", "heartbeat_timeout", 0)
	waittest.Until(t, 10*time.Second, "the idle agent removed", func() bool { return len(done.got()) == 1 })
	if got := done.got(); got[0] != "heartbeat_timeout" {
		t.Fatalf("the backend was told %q", got)
	}

	m.Gone("scaler-process-lost", "read_error", 1)
	m.Gone("scaler-process-back", "read_error", 1)
	clock.Advance(30 * time.Second)
	m.pass(ctx)
	if len(lost.got())+len(back.got()) != 0 {
		t.Fatal("an agent holding a job was removed inside the recovery window")
	}
	m.Registered("scaler-process-back") // it reconnected in time
	clock.Advance(31 * time.Second)
	m.pass(ctx)
	if got := lost.got(); len(got) != 1 || got[0] != "heartbeat-timeout" {
		t.Fatalf("the lost agent's backend was told %q", got)
	}
	if len(back.got()) != 0 {
		t.Fatal("an agent back in time was removed")
	}
	spawns, _ := db.Scalers().List(ctx, "")
	if len(spawns) != 1 || spawns[0].AgentID != "scaler-process-back" {
		t.Fatalf("spawns left %+v", spawns)
	}
}
