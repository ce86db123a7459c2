package store_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

const holdReason = "waiting for approval: pull request from fork mallory/app by mallory"

// heldRun is a run of a fork pull request held for approval: a root, a job
// that needs it, and a matrix of two bounded to one at a time.
func heldRun() store.NewRun {
	nr := newRun(job("build"), job("test", need("build")),
		store.NewJob{Name: "lint (1)", Base: "lint", MaxParallel: 1, Requirement: linuxReq(), Matrix: json.RawMessage(`{"n":"1"}`)},
		store.NewJob{Name: "lint (2)", Base: "lint", MaxParallel: 1, Requirement: linuxReq(), Matrix: json.RawMessage(`{"n":"2"}`)})
	nr.Hold, nr.Timeout = holdReason, time.Hour
	return nr
}

// A held run's jobs stay pending, with the approval as their reason, out
// of every queue: no claim takes them, queue expiry and the run's own
// timeout pass them by, however long they wait. Approve records who and
// when, restarts the timeout, and releases the jobs as creating the run
// would have; a second approval, an approval of an unheld run, and one of
// a run cancelled while it waited (the cancel rejects it) are conflicts.
// Proves B97 (docs/behaviours.md).
func TestHeldRunWaitsForApproval(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, heldRun())
		if len(cr.Effects.Queued) != 0 {
			t.Fatalf("creating a held run queued %v", cr.Effects.Queued)
		}
		run := mustRun(t, db, cr.ID)
		if !run.Approval.Waiting() || run.Approval.Reason != holdReason || run.Status != kiln.RunPending {
			t.Fatalf("held run: status %s, approval %+v", run.Status, run.Approval)
		}
		for _, j := range run.Jobs {
			if j.Status != kiln.JobPending || j.PendingReason != holdReason {
				t.Fatalf("held job %s: %s, %q", j.Name, j.Status, j.PendingReason)
			}
		}
		// The queue lists the held jobs, saying they wait for a person.
		waiting, err := db.Queue().Waiting(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(waiting) != len(run.Jobs) {
			t.Fatalf("the queue lists %d jobs of the held run, want its %d", len(waiting), len(run.Jobs))
		}
		for _, w := range waiting {
			if w.Status != kiln.JobPending || w.Reason != holdReason || w.RunID != cr.ID {
				t.Fatalf("held job in the queue: %+v", w)
			}
		}
		// Days go by: nothing claims, expires or times the run out.
		clock.Advance(72 * time.Hour)
		if cs, err := db.Queue().Claim(ctx, "agent-1", linux, 10); err != nil || len(cs) != 0 {
			t.Fatalf("claimed a held job: %v %v", cs, err)
		}
		if res, err := db.Queue().Expire(ctx, func(kiln.Requirement) bool { return true }); err != nil || len(res.Jobs) != 0 {
			t.Fatalf("expired held jobs: %+v %v", res.Jobs, err)
		}
		if over, err := db.Runs().Overdue(ctx, 10); err != nil || len(over) != 0 {
			t.Fatalf("a held run is overdue: %v %v", over, err)
		}

		res, err := db.Runs().Approve(ctx, cr.ID, "alice")
		if err != nil {
			t.Fatal(err)
		}
		queued := map[string]bool{}
		for _, q := range res.Effects.Queued {
			queued[q.Name] = true
		}
		if len(queued) != 2 || !queued["build"] || !queued["lint (1)"] {
			t.Fatalf("approval queued %v, want build and lint (1)", queued)
		}
		run = mustRun(t, db, cr.ID)
		if run.Approval.Waiting() || run.Approval.ApprovedBy != "alice" || !run.Approval.ApprovedAt.Equal(clock.Now()) {
			t.Fatalf("approval not recorded: %+v", run.Approval)
		}
		if want := clock.Now().Add(time.Hour); !run.Deadline.Equal(want) {
			t.Fatalf("deadline %s, want an hour after the approval (%s)", run.Deadline, want)
		}
		reasons := map[string]string{}
		for _, j := range run.Jobs {
			reasons[j.Name] = j.PendingReason
		}
		if reasons["test"] != "waiting for needs: build" || !strings.Contains(reasons["lint (2)"], "max_parallel") {
			t.Fatalf("pending reasons after approval: %q", reasons)
		}
		waiting, err = db.Queue().Waiting(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(waiting) != 2 || waiting[0].Status != kiln.JobQueued || waiting[1].Status != kiln.JobQueued {
			t.Fatalf("after approval the queue lists %+v, want the two queued jobs", waiting)
		}
		if cs, err := db.Queue().Claim(ctx, "agent-1", linux, 10); err != nil || len(cs) != 2 {
			t.Fatalf("after approval an agent claims %d jobs (%v), want 2", len(cs), err)
		}
		if _, err := db.Runs().Approve(ctx, cr.ID, "bob"); kiln.ErrorCode(err) != kiln.CodeConflict || !strings.Contains(err.Error(), "approved already, by alice") {
			t.Fatalf("second approval: %v", err)
		}

		// Cancel rejects: the held jobs end cancelled and approval is over.
		rejected := mustCreate(t, db, heldRun())
		if _, err := db.Runs().Cancel(ctx, rejected.ID, "rejected", false); err != nil {
			t.Fatal(err)
		}
		run = mustRun(t, db, rejected.ID)
		if run.Status != kiln.RunCancelled || !run.Approval.Waiting() {
			t.Fatalf("rejected run: %s %+v", run.Status, run.Approval)
		}
		for _, j := range run.Jobs {
			if j.Status != kiln.JobCancelled {
				t.Fatalf("rejected run's job %s is %s", j.Name, j.Status)
			}
		}
		if _, err := db.Runs().Approve(ctx, rejected.ID, "alice"); kiln.ErrorCode(err) != kiln.CodeConflict {
			t.Fatalf("approving a rejected run: %v", err)
		}

		plain := mustCreate(t, db, newRun(job("a")))
		if _, err := db.Runs().Approve(ctx, plain.ID, "alice"); kiln.ErrorCode(err) != kiln.CodeConflict || !strings.Contains(err.Error(), "needs no approval") {
			t.Fatalf("approving a run that was never held: %v", err)
		}
		if mustRun(t, db, plain.ID).Approval != nil {
			t.Fatal("an unheld run shows an approval")
		}
	})
}

// The job of a fork pull request is claimed only by agents whose mandatory
// labels all lie in what its source allows forks: a deploy agent never
// gets one unless the source names deploy, while ordinary agents do.
// Proves B98 (docs/behaviours.md).
func TestForkJobsSkipAgentsWithMandatoryLabels(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		forkReq := func(allowed ...string) kiln.Requirement {
			return kiln.Requirement{RunsOn: kiln.NewLabels("linux", "deploy"), Fork: true, ForkLabels: kiln.NewLabels(allowed...)}
		}
		deploy := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "deploy"), Mandatory: kiln.NewLabels("deploy")}
		denied := mustCreate(t, db, newRun(store.NewJob{Name: "ship", Requirement: forkReq()}))
		if cs, err := db.Queue().Claim(ctx, "deploy-1", deploy, 5); err != nil || len(cs) != 0 {
			t.Fatalf("a deploy agent claimed a fork job: %v %v", cs, err)
		}
		keys, err := db.Queue().Keys(ctx)
		if err != nil || len(keys) != 1 || keys[0] != "deploy,linux fork:" {
			t.Fatalf("queued keys %q (%v)", keys, err)
		}
		allowed := mustCreate(t, db, newRun(store.NewJob{Name: "ship", Requirement: forkReq("deploy")}))
		cs, err := db.Queue().Claim(ctx, "deploy-1", deploy, 5)
		if err != nil || len(cs) != 1 || cs[0].RunID != allowed.ID {
			t.Fatalf("a deploy agent the source allows forks claimed %+v (%v)", cs, err)
		}
		if j := mustJob(t, db, denied.Jobs["ship"]); j.Status != kiln.JobQueued || !j.Requirement.Fork {
			t.Fatalf("the denied fork job is %s %+v", j.Status, j.Requirement)
		}
		plain := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "deploy")}
		if cs, err := db.Queue().Claim(ctx, "plain-1", plain, 5); err != nil || len(cs) != 1 || cs[0].RunID != denied.ID {
			t.Fatalf("an agent without mandatory labels claimed %+v (%v)", cs, err)
		}
	})
}
