package scaler

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// sizes is a backend that records the size of every agent it is asked
// for; its agents never register, and go when removed.
type sizes struct {
	mu   sync.Mutex
	reqs []SpawnRequest
}

func (s *sizes) Spawn(_ context.Context, req SpawnRequest) (Instance, error) {
	s.mu.Lock()
	s.reqs = append(s.reqs, req)
	s.mu.Unlock()
	return &sizedAgent{exited: make(chan struct{})}, nil
}

// sizedAgent ends when removed.
type sizedAgent struct {
	once   sync.Once
	exited chan struct{}
}

func (a *sizedAgent) Exited() <-chan struct{} { return a.exited }
func (a *sizedAgent) ExitErr() error          { return nil }
func (a *sizedAgent) Tail() string            { return "" }
func (a *sizedAgent) Destroy(context.Context, string) error {
	a.once.Do(func() { close(a.exited) })
	return nil
}

func (s *sizes) got() []SpawnRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.reqs)
}

// busyFleet has no idle agent for anything.
type busyFleet struct{ idleFleet }

func (busyFleet) IdleAccepting(kiln.Requirement) bool { return false }

// A job's resources are what its agent is given and reserves against the
// scaler's resource_cap and the global scaler_caps; a job without them
// gets the scaler's own size (default_resources). A job that does not fit
// what is left waits "at capacity" with the CPUs or memory in its reason,
// and goes once a reservation is given back; an agent takes only jobs
// within its size; a job no scaler can ever give enough is told so, and is
// not served (the unroutable probe's answer).
// Proves B198, B199 (docs/behaviours.md).
func TestResourcesAreReservedAgainstTheBudgets(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		backend := &sizes{}
		var mu sync.Mutex
		used := map[string]kiln.Resources{}
		m, err := NewManager(db, ManagerConfig{
			Hooks: Hooks{Reserved: func(name, _ string, r kiln.Resources) { mu.Lock(); used[name] = r; mu.Unlock() }},
			Scalers: []Config{{Name: "b", Type: "process", Labels: kiln.Labels{"scaled"}, MaxAgents: 4,
				DefaultResources: Resources{CPUs: 1, Memory: "1g"}, ResourceCap: Resources{CPUs: 4}}},
			Caps: Caps{MaxAgents: 10, Memory: "5GiB"}, Instance: "server-1", Backends: map[string]Backend{"process": backend},
		})
		if err != nil {
			t.Fatal(err)
		}
		m.SetFleet(busyFleet{})
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); m.shutdown() })

		plain := kiln.Requirement{RunsOn: kiln.NewLabels("scaled")}
		two := kiln.Requirement{RunsOn: kiln.NewLabels("scaled"), Resources: kiln.Resources{MilliCPUs: 2000}}
		spec := json.RawMessage(`{"agent":{"name":"x"}}`)
		cr, err := db.Runs().Create(ctx, store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main",
			SHA: "abc", Event: json.RawMessage(`{"name":"push"}`), Jobs: []store.NewJob{
				{Name: "plain", Requirement: plain, Spec: spec, Steps: []string{"s"}},
				{Name: "two-a", Requirement: two, Spec: spec, Steps: []string{"s"}},
				{Name: "two-b", Requirement: two, Spec: spec, Steps: []string{"s"}},
			}})
		if err != nil {
			t.Fatal(err)
		}
		if n := m.demand(ctx); n != 2 {
			t.Fatalf("started %d agents, want 2 (1 CPU + 2 CPUs of the 4 the scaler may reserve)", n)
		}
		waittest.Until(t, 10*time.Second, "two agents asked of the backend", func() bool { return len(backend.got()) == 2 })
		bySize := map[float64]SpawnRequest{}
		for _, r := range backend.got() {
			bySize[r.CPUs] = r
		}
		if r, ok := bySize[1]; !ok || r.MemoryBytes != 1<<30 || r.JobID != cr.Jobs["plain"] {
			t.Fatalf("the job without resources: %+v (want default_resources: 1 CPU, 1 GiB)", bySize)
		}
		if r, ok := bySize[2]; !ok || r.MemoryBytes != 1<<30 || (r.JobID != cr.Jobs["two-a"] && r.JobID != cr.Jobs["two-b"]) {
			t.Fatalf("the 2-CPU job: %+v (want 2 CPUs and the default 1 GiB)", bySize)
		}
		mu.Lock()
		if want := (kiln.Resources{MilliCPUs: 3000, Memory: 2 << 30}); used["b"] != want || used[GlobalScaler] != want {
			t.Errorf("the metrics were told %+v, want %+v for b and in all", used, want)
		}
		mu.Unlock()
		// While its agents start, the key's jobs read "spawning" (B266);
		// once they registered, the one left waits at capacity.
		if reason, _ := m.Reason(two); !strings.HasPrefix(reason, "spawning an agent (scaler b)") {
			t.Fatalf("while the agents start: %q", reason)
		}
		var small string
		for _, r := range backend.got() {
			if r.CPUs == 1 {
				small = r.AgentID
			}
		}
		_, _, limit := m.Registered(small)
		m.Registered(bySize[2].AgentID)
		reason, _ := m.Reason(two)
		if want := "at capacity (scaler b: 3 CPUs of 4 CPUs reserved, the job needs 2 CPUs)"; reason != want {
			t.Fatalf("the second 2-CPU job waits with %q, want %q", reason, want)
		}

		// An agent takes only what fits it.
		if limit != (kiln.Resources{MilliCPUs: 1000, Memory: 1 << 30}) ||
			(kiln.AgentLabels{Labels: kiln.NewLabels("scaled"), Limit: limit}).Accepts(two) {
			t.Fatalf("the 1-CPU agent's limit %+v lets it take a 2-CPU job", limit)
		}

		// Its job done, giving the 1-CPU agent back makes room for the
		// waiting job.
		if c, err := db.Queue().ClaimJob(ctx, small, kiln.AgentLabels{Labels: kiln.NewLabels("scaled")}, cr.Jobs["plain"]); err != nil || c == nil {
			t.Fatalf("the small agent takes its job: %v %v", c, err)
		}
		m.mu.Lock()
		a := m.agents[small]
		m.mu.Unlock()
		m.destroy(ctx, a, "job-complete")
		if reason, _ := m.Reason(two); !strings.HasPrefix(reason, "spawning an agent (scaler b)") {
			t.Fatalf("after the reservation came back: %q", reason)
		}
		if n := m.demand(ctx); n != 1 {
			t.Fatalf("started %d agents for the waiting job, want 1", n)
		}
		waittest.Until(t, 10*time.Second, "a third agent asked of the backend", func() bool { return len(backend.got()) == 3 })
		third := backend.got()[2]
		if third.CPUs != 2 || third.JobID == bySize[2].JobID || (third.JobID != cr.Jobs["two-a"] && third.JobID != cr.Jobs["two-b"]) {
			t.Fatalf("the third agent: %+v", third)
		}

		// Nothing can ever give 5 CPUs (resource_cap) or 8 GiB (scaler_caps).
		for r, want := range map[kiln.Resources]string{
			{MilliCPUs: 5000}: "no scaler can start an agent with 5 CPUs (b: at most 4 CPUs (resource_cap.cpus))",
			{Memory: 8 << 30}: "no scaler can start an agent with 8 GiB (b: at most 5 GiB (scaler_caps.memory))",
		} {
			req := kiln.Requirement{RunsOn: kiln.NewLabels("scaled"), Resources: r}
			if got, ok := m.Reason(req); !ok || got != want {
				t.Errorf("reason %q, want %q", got, want)
			}
			if m.Serves(req) || m.TooBig(req) != want {
				t.Errorf("%v: served %v, too big %q", r, m.Serves(req), m.TooBig(req))
			}
		}
		if !m.Serves(two) || m.TooBig(two) != "" {
			t.Fatal("a 2-CPU job is not served")
		}
	})
}

// A scaler whose own agents are bigger than its budget could never start
// one: refused at start, naming both.
// Proves B199 (docs/behaviours.md).
func TestAScalerLargerThanItsBudgetIsRefused(t *testing.T) {
	c := Config{Name: "big", Type: "docker", Image: "i", Labels: kiln.Labels{"x"}, MaxAgents: 1, CPUs: 8, ResourceCap: Resources{CPUs: 4}}
	err := Validate([]Config{c}, DefaultCaps())
	want := "scalers[0] (big): each agent is given 8 CPUs, more than a budget allows (big: at most 4 CPUs (resource_cap.cpus)), so it could never start one"
	if len(err) != 1 || err[0].Error() != want {
		t.Fatalf("%v, want %q", err, want)
	}
}
