package store_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The store records on the run's timeline, in the transaction of the
// transition, each release (a root job at creation, a dependent when its
// needs are met), each dispatch (the claim: which attempt, which agent;
// also the claims of a transaction that completes a job and claims the
// agent's next, after that job's release), each requeue, and a rerun on
// both runs with the jobs it carried over. Proves B316 (docs/behaviours.md).
func TestRunTimelineRecordsReleasesDispatchesRequeuesAndReruns(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("build"), job("test", need("build"))))
		build, test := cr.Jobs["build"], cr.Jobs["test"]
		c := claimJob(t, db, "agent-1", build)
		if _, err := db.Queue().Requeue(ctx, lease(c), "the agent is busy"); err != nil {
			t.Fatal(err)
		}
		c = claimJob(t, db, "agent-2", build)
		if err := db.Jobs().Start(ctx, lease(c)); err != nil {
			t.Fatal(err)
		}
		// The fleet's complete-and-claim: one transaction ends build,
		// releases test and claims it for the same agent.
		var next [][]store.Claimed
		err := db.Update(ctx, func(tx *store.Tx) error {
			if _, err := tx.Jobs().Complete(ctx, store.Completion{Lease: lease(c), Status: kiln.JobSuccess}); err != nil {
				return err
			}
			var err error
			next, err = tx.Queue().ClaimFor(ctx, []store.ClaimAsk{{AgentID: "agent-2", Labels: linux, Slots: 1}})
			return err
		})
		if err != nil || len(next) != 1 || len(next[0]) != 1 || next[0][0].JobID != test {
			t.Fatalf("complete and claim: %v %+v", err, next)
		}
		complete(t, db, next[0][0], kiln.JobFailed)

		wantTimeline(t, db, cr.ID, []string{
			"build job.released queued for an agent labelled linux",
			"build job.dispatched attempt 1 sent to agent agent-1",
			"build job.requeued back in the queue: the agent is busy",
			"build job.dispatched attempt 2 sent to agent agent-2",
			"test job.released needs met (build): queued for an agent labelled linux",
			"test job.dispatched attempt 1 sent to agent agent-2",
		}, map[string]string{build: "build", test: "test"})

		// Rerun the failed job: the new run says what it reruns and what it
		// carried over; the old run says where it was rerun.
		nr := newRun(job("build"), job("test", need("build")))
		nr.RerunOf = cr.ID
		nr.Jobs[0].Reuse = &store.Reused{Status: kiln.JobSuccess}
		rerun := mustCreate(t, db, nr)
		wantTimeline(t, db, rerun.ID, []string{
			fmt.Sprintf(" run.rerun rerun of run #%d (failed jobs only: 1 of 2 carried over)", cr.Number),
			"build job.reused success in the run this one reruns: not run again",
			"test job.released needs met (build): queued for an agent labelled linux",
		}, map[string]string{rerun.Jobs["build"]: "build", rerun.Jobs["test"]: "test"})
		evs, err := db.Runs().Timeline(ctx, cr.ID, "")
		if err != nil || evs[len(evs)-1].Type != store.EventRerun ||
			evs[len(evs)-1].Detail != fmt.Sprintf("rerun as run #%d (failed jobs only: 1 of 2 carried over)", rerun.Number) {
			t.Fatalf("the old run's timeline ends with %+v (%v)", evs[len(evs)-1], err)
		}
		for _, ev := range evs {
			if !ev.At.Equal(clock.Now()) {
				t.Fatalf("event %s at %s, want the transaction's time %s", ev.Type, ev.At, clock.Now())
			}
		}
	})
}

// wantTimeline checks a run's timeline, each event as "job type detail".
func wantTimeline(t *testing.T, db *store.DB, runID string, want []string, names map[string]string) {
	t.Helper()
	evs, err := db.Runs().Timeline(ctx, runID, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		got = append(got, names[ev.JobID]+" "+ev.Type+" "+ev.Detail)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("timeline:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A run's fingerprint stays while nothing on its page changes and changes
// with every move of its jobs, even within one millisecond (the clock is
// stopped here), and with its timeline. Proves B318 (docs/behaviours.md).
func TestRunFingerprint(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("build"), job("test", need("build"))))
		seen := map[string]string{}
		step := func(what string) {
			t.Helper()
			fp, err := db.Runs().Fingerprint(ctx, cr.ID)
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := db.Runs().Fingerprint(ctx, cr.ID); again != fp {
				t.Fatalf("%s: the fingerprint moved without a change: %q, %q", what, fp, again)
			}
			if prev, ok := seen[fp]; ok {
				t.Fatalf("%s: the fingerprint %q is the one after %s", what, fp, prev)
			}
			seen[fp] = what
		}
		step("create")
		c := claimJob(t, db, "agent-1", cr.Jobs["build"])
		step("claim")
		if err := db.Jobs().Start(ctx, lease(c)); err != nil {
			t.Fatal(err)
		}
		step("start")
		complete(t, db, c, kiln.JobSuccess)
		step("complete")
		if err := db.Runs().AddRunEvent(ctx, store.RunEvent{RunID: cr.ID, Type: "scaler.ready", Detail: "x"}); err != nil {
			t.Fatal(err)
		}
		step("event")
		if _, err := db.Runs().Fingerprint(ctx, "no-such-run"); kiln.ErrorCode(err) != kiln.CodeNotFound {
			t.Fatalf("no such run: %v", err)
		}
	})
}
