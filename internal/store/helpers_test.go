package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

var ctx = context.Background()

var linux = kiln.AgentLabels{Labels: kiln.NewLabels("linux", "amd64")}

func linuxReq() kiln.Requirement { return kiln.Requirement{RunsOn: kiln.NewLabels("linux")} }

// suite runs fn on each backend with a fake clock.
func suite(t *testing.T, fn func(t *testing.T, db *store.DB, clock *storetest.Clock), opts ...storetest.Option) {
	t.Helper()
	for _, b := range storetest.Backends {
		t.Run(b.Name, func(t *testing.T) {
			clock := storetest.NewClock()
			cfg := store.Config{URL: b.URL(t), Clock: clock.Now, Releaser: storetest.QueueAsCreated}
			for _, o := range opts {
				o(&cfg)
			}
			db, err := store.Open(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			fn(t, db, clock)
		})
	}
}

// job is a NewJob on linux.
func job(name string, needs ...store.NeedEdge) store.NewJob {
	return store.NewJob{Name: name, Requirement: linuxReq(), Needs: needs, Steps: []string{"checkout", "build"}}
}

func need(base string, accept ...kiln.Result) store.NeedEdge {
	return store.NeedEdge{Job: base, Accept: accept}
}

func newRun(jobs ...store.NewJob) store.NewRun {
	return store.NewRun{Workflow: "ci", Repository: "acme/app", Source: "gh", Ref: "refs/heads/main", SHA: "abc",
		Event: json.RawMessage(`{"name":"push"}`), Jobs: jobs}
}

func mustCreate(t *testing.T, db *store.DB, nr store.NewRun) store.CreatedRun {
	t.Helper()
	cr, err := db.Runs().Create(ctx, nr)
	if err != nil {
		t.Fatalf("create run: %v", err)
	}
	return cr
}

func mustJob(t *testing.T, db *store.DB, id string) store.Job {
	t.Helper()
	j, err := db.Jobs().Get(ctx, id)
	if err != nil {
		t.Fatalf("get job %s: %v", id, err)
	}
	return j
}

func mustRun(t *testing.T, db *store.DB, id string) store.Run {
	t.Helper()
	r, err := db.Runs().Get(ctx, id)
	if err != nil {
		t.Fatalf("get run %s: %v", id, err)
	}
	return r
}

func wantStatus(t *testing.T, db *store.DB, id string, want kiln.JobStatus) store.Job {
	t.Helper()
	j := mustJob(t, db, id)
	if j.Status != want {
		t.Fatalf("job %s (%s) is %s, want %s (error %q)", j.Name, id, j.Status, want, j.Error)
	}
	return j
}

func wantRunStatus(t *testing.T, db *store.DB, id string, want kiln.RunStatus) store.Run {
	t.Helper()
	r := mustRun(t, db, id)
	if r.Status != want {
		t.Fatalf("run %s is %s, want %s", id, r.Status, want)
	}
	return r
}

// claimOne claims exactly one job for agent.
func claimOne(t *testing.T, db *store.DB, agent string) store.Claimed {
	t.Helper()
	cs, err := db.Queue().Claim(ctx, agent, linux, 1)
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(cs) != 1 {
		t.Fatalf("claim returned %d jobs, want 1", len(cs))
	}
	return cs[0]
}

// claimJob claims until it gets the job with the id (the queue is FIFO).
func claimJob(t *testing.T, db *store.DB, agent, id string) store.Claimed {
	t.Helper()
	c := claimOne(t, db, agent)
	if c.JobID != id {
		t.Fatalf("claimed %s (%s), want %s", c.Name, c.JobID, id)
	}
	return c
}

// claimEach claims the run's jobs of names in order, each by an agent of
// its own (agent-1, agent-2, …).
func claimEach(t *testing.T, db *store.DB, cr store.CreatedRun, names ...string) []store.Claimed {
	t.Helper()
	out := make([]store.Claimed, len(names))
	for i, n := range names {
		out[i] = claimJob(t, db, fmt.Sprintf("agent-%d", i+1), cr.Jobs[n])
	}
	return out
}

func lease(c store.Claimed) store.Lease { return store.Lease{JobID: c.JobID, Epoch: c.Epoch} }

func complete(t *testing.T, db *store.DB, c store.Claimed, status kiln.JobStatus) store.Effects {
	t.Helper()
	eff, err := db.Jobs().Complete(ctx, store.Completion{Lease: lease(c), Status: status})
	if err != nil {
		t.Fatalf("complete %s %s: %v", c.Name, status, err)
	}
	return eff
}

// runJob claims, starts and completes the job with the id.
func runJob(t *testing.T, db *store.DB, id string, status kiln.JobStatus) store.Effects {
	t.Helper()
	c := claimJob(t, db, "agent-1", id)
	if err := db.Jobs().Start(ctx, lease(c)); err != nil {
		t.Fatalf("start: %v", err)
	}
	return complete(t, db, c, status)
}

func sec(n int) time.Duration { return time.Duration(n) * time.Second }

// unstartRun puts a run back to pending, as if the claim that started it
// had skipped its locked row (a PostgreSQL claim does) or its coordinator
// had died between the claim's two statements.
func unstartRun(t *testing.T, db *store.DB, runID string) {
	t.Helper()
	if _, err := db.SQL().ExecContext(ctx, "UPDATE runs SET status = 'pending', started_at = NULL WHERE id = $1", runID); err != nil {
		t.Fatal(err)
	}
}
