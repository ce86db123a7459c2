package engine

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(storetest.M(m)) }

// recorder is the engine's Dispatcher in tests: it records what the engine
// asked the fleet to do.
type recorder struct {
	mu      sync.Mutex
	woken   []store.JobRef
	cancels []cancelCall
	// effects, when set, stands for the fleet's own store operations.
	effects chan store.Effects
}

type cancelCall struct {
	t     store.CancelTarget
	force bool
}

func (r *recorder) Wake(jobs []store.JobRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.woken = append(r.woken, jobs...)
}

func (r *recorder) Cancel(t store.CancelTarget, force bool, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancels = append(r.cancels, cancelCall{t, force})
}

// Effects is nil unless a test set it: the tests apply what their store
// operations return.
func (r *recorder) Effects() <-chan store.Effects { return r.effects }

func (r *recorder) wokenNames() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, j := range r.woken {
		out = append(out, j.Name)
	}
	return out
}

type bundle struct {
	eng   *Engine
	db    *store.DB
	rec   *recorder
	clock *storetest.Clock
}

func setup(t *testing.T, db func(t *testing.T, clock *storetest.Clock) *store.DB) bundle {
	clock := storetest.NewClock()
	d := db(t, clock)
	rec := &recorder{}
	return bundle{eng: New(d, rec, testConfig(clock)), db: d, rec: rec, clock: clock}
}

func testConfig(clock *storetest.Clock) Config {
	return Config{Clock: clock.Now, UnroutableGrace: time.Minute, CancelGrace: time.Minute}
}

// forEach runs fn on SQLite and PostgreSQL.
func forEach(t *testing.T, fn func(t *testing.T, b bundle)) {
	for _, be := range storetest.Backends {
		t.Run(be.Name, func(t *testing.T) {
			fn(t, setup(t, func(t *testing.T, clock *storetest.Clock) *store.DB {
				d, err := store.Open(context.Background(), store.Config{URL: be.URL(t), Clock: clock.Now, Releaser: Release})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { d.Close() })
				return d
			}))
		})
	}
}

func parse(t *testing.T, src string) (*workflow.Workflow, []byte) {
	t.Helper()
	wf, err := workflow.Parse(".kiln/workflows/ci.yml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return wf, []byte(src)
}

func pushEvent() *kiln.Event {
	return &kiln.Event{
		Name: kiln.EventPush, Ref: "refs/heads/main", Branch: "main", SHA: strings.Repeat("a", 40),
		Repository: "acme/app", CloneURL: "file:///srv/acme/app.git", Actor: "alice",
	}
}

func start(t *testing.T, b bundle, src string, ev *kiln.Event, inputs map[string]any) store.CreatedRun {
	t.Helper()
	wf, content := parse(t, src)
	d := trigger.Match(wf, ev)
	runs, err := b.eng.Start(context.Background(), StartRequest{Source: "src", Event: ev, Matches: []Match{{Workflow: wf, Content: content, Decision: d, Inputs: inputs}}}, nil)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return runs[0]
}

func job(t *testing.T, b bundle, runID, name string) store.Job {
	t.Helper()
	run, err := b.db.Runs().Get(context.Background(), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range run.Jobs {
		if j.Name == name {
			return j
		}
	}
	t.Fatalf("run has no job %q", name)
	return store.Job{}
}

// finish plays an agent: claim the named job, start it and complete it.
func finish(t *testing.T, b bundle, agent kiln.AgentLabels, name string, status kiln.JobStatus, outputs map[string]string) {
	t.Helper()
	ctx := context.Background()
	claimed, err := b.db.Queue().Claim(ctx, "agent-1", agent, 1)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim for %s: %v, %d jobs", name, err, len(claimed))
	}
	c := claimed[0]
	if c.Name != name {
		t.Fatalf("claimed %q, want %q", c.Name, name)
	}
	l := store.Lease{JobID: c.JobID, Epoch: c.Epoch}
	if err := b.db.Jobs().Start(ctx, l); err != nil {
		t.Fatal(err)
	}
	eff, err := b.db.Jobs().Complete(ctx, store.Completion{Lease: l, Status: status, Outputs: outputs})
	if err != nil {
		t.Fatal(err)
	}
	b.eng.Apply(eff)
}

// specOf returns the agent's part of a stored spec.
func specOf(t *testing.T, raw json.RawMessage) proto.JobSpec {
	t.Helper()
	j, err := jobspec.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return j.Agent
}

var linux = kiln.AgentLabels{Labels: kiln.NewLabels("linux", "amd64", "local")}

func TestStartQueuesRootsAndWakesAgents(t *testing.T) {
	forEach(t, func(t *testing.T, b bundle) {
		run := start(t, b, `
on: push
env: {GREETING: "hello ${{ event.actor }}"}
jobs:
  build:
    runs_on: [linux]
    env: {TARGET: "${{ event.branch }}-${{ run.number }}"}
    steps:
      - run: echo "${{ env.GREETING }}"
  test:
    needs: [build]
    steps:
      - run: make test
`, pushEvent(), nil)
		if got := b.rec.wokenNames(); len(got) != 1 || got[0] != "build" {
			t.Fatalf("woken %v, want [build]", got)
		}
		build := job(t, b, run.ID, "build")
		if build.Status != kiln.JobQueued || build.Requirement.Key() != "linux" {
			t.Fatalf("build: %s %q", build.Status, build.Requirement.Key())
		}
		if test := job(t, b, run.ID, "test"); test.Status != kiln.JobPending {
			t.Fatalf("test: %s", test.Status)
		}
		spec := specOf(t, build.Spec)
		if spec.WorkflowEnv["GREETING"] != "hello alice" || spec.JobEnv["TARGET"] != "main-"+itoa(run.Number) {
			t.Fatalf("env not evaluated at release: %v %v", spec.WorkflowEnv, spec.JobEnv)
		}
		stored, err := jobspec.Decode(build.Spec)
		if err != nil {
			t.Fatal(err)
		}
		if co := stored.Checkout; co == nil || co.SHA != strings.Repeat("a", 40) || co.URL != "file:///srv/acme/app.git" ||
			co.Source != "src" || co.Repository != "acme/app" || co.Ref != "refs/heads/main" || spec.Checkout != nil {
			t.Fatalf("checkout: %+v (agent's: %+v)", co, spec.Checkout)
		}
		if spec.Steps[0].Run != `echo "${{ env.GREETING }}"` {
			t.Fatalf("step run must stay a template for the agent: %q", spec.Steps[0].Run)
		}
		ev := spec.Contexts["event"].(map[string]any)
		if ev["actor"] != "alice" || spec.Contexts["run"].(map[string]any)["id"] != run.ID {
			t.Fatalf("contexts: %v", spec.Contexts)
		}

		finish(t, b, linux, "build", kiln.JobSuccess, map[string]string{"version": "1.2"})
		if got := b.rec.wokenNames(); len(got) != 2 || got[1] != "test" {
			t.Fatalf("after build: woken %v", got)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
