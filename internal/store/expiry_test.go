package store_test

import (
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// B32, B38, B39 and B40: a job no agent took in time expires, and a
// requeued job's timeout starts again; the expiry sweep returns each expired
// job with its last_provisioning_error; a recorded provisioning failure is
// the job's terminal message and the run's failure_reason (if unset); without
// one the generic timeout (or unroutable) message is used and the run's
// failure_reason is left alone.
func TestQueueExpiry(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		const detail = "agent process error: spawn node ENOENT"
		withErr := mustCreate(t, db, newRun(job("a")))
		generic := mustCreate(t, db, newRun(job("a")))
		unroutable := mustCreate(t, db, newRun(reqJob("a", []string{"sparc"})))
		fresh := mustCreate(t, db, newRun(reqJob("a", []string{"fresh"})))
		if _, err := db.Queue().SetProvisioningError(ctx, withErr.Jobs["a"], detail); err != nil {
			t.Fatal(err)
		}
		// A run that already has a failure_reason keeps it.
		keeps := mustCreate(t, db, newRun(job("a"), job("b")))
		if _, err := db.Queue().SetProvisioningError(ctx, keeps.Jobs["a"], "first"); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Queue().SetProvisioningError(ctx, keeps.Jobs["b"], "second"); err != nil {
			t.Fatal(err)
		}

		clock.Advance(time.Hour - time.Millisecond)
		if res, _ := db.Queue().Expire(ctx, nil); len(res.Jobs) != 0 {
			t.Fatalf("expired early: %+v", res.Jobs)
		}
		// fresh is requeued-like: give it a later expiry by dispatching and
		// rejecting it now.
		cs, err := db.Queue().Claim(ctx, "agent-1", kiln.AgentLabels{Labels: kiln.NewLabels("fresh")}, 1)
		if err != nil || len(cs) != 1 {
			t.Fatalf("claim %+v %v", cs, err)
		}
		if _, err := db.Queue().Requeue(ctx, lease(cs[0]), "agent busy"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Millisecond)
		unroutableKey := func(r kiln.Requirement) bool { return r.RunsOn.Has("sparc") }
		res, err := db.Queue().Expire(ctx, unroutableKey)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]store.ExpiredJob{}
		for _, x := range res.Jobs {
			got[x.RunID+"/"+x.Name] = x
		}
		if len(res.Jobs) != 5 {
			t.Fatalf("expired %d jobs: %+v", len(res.Jobs), res.Jobs)
		}
		// B38 and B39.
		x := got[withErr.ID+"/a"]
		if x.ID != withErr.Jobs["a"] || x.LastProvisioningError != detail || x.Status != kiln.JobTimedOutStale || x.Error != detail {
			t.Fatalf("with provisioning error: %+v", x)
		}
		j := wantStatus(t, db, withErr.Jobs["a"], kiln.JobTimedOutStale)
		if j.Error != detail {
			t.Fatalf("job error %q", j.Error)
		}
		if r := wantRunStatus(t, db, withErr.ID, kiln.RunFailed); r.FailureReason != detail {
			t.Fatalf("run failure reason %q", r.FailureReason)
		}
		if r := mustRun(t, db, keeps.ID); r.FailureReason != "first" && r.FailureReason != "second" {
			t.Fatalf("run failure reason %q", r.FailureReason)
		}
		// B40: the generic message, the run's failure_reason untouched.
		x = got[generic.ID+"/a"]
		if x.LastProvisioningError != "" || x.Status != kiln.JobTimedOutStale ||
			x.Error != "queue timeout: no agent took this job within 1h0m0s" {
			t.Fatalf("generic: %+v", x)
		}
		if r := wantRunStatus(t, db, generic.ID, kiln.RunFailed); r.FailureReason != "" {
			t.Fatalf("generic run failure reason %q", r.FailureReason)
		}
		// B40: the unroutable message when nothing could match.
		x = got[unroutable.ID+"/a"]
		if x.Status != kiln.JobUnroutable || x.Error != "unroutable: no connected agent and no scaler can offer labels sparc" {
			t.Fatalf("unroutable: %+v", x)
		}
		wantStatus(t, db, unroutable.Jobs["a"], kiln.JobUnroutable)
		// The requeued job's queue timeout restarted.
		wantStatus(t, db, fresh.Jobs["a"], kiln.JobQueued)
	})
}

// A job whose Release set no expiry never expires; an expired job can no
// longer be claimed even before the sweep runs.
// Proves B32 (docs/behaviours.md).
func TestQueueExpiryBounds(t *testing.T) {
	release := func(rj store.ReadyJob) store.Release {
		if rj.Name == "forever" {
			return store.Release{QueueTimeout: -1}
		}
		return store.Release{}
	}
	suite(t, func(t *testing.T, never *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, never, newRun(job("forever"), job("hour")))
		clock.Advance(2 * time.Hour)
		cs, err := never.Queue().Claim(ctx, "agent-1", linux, 5)
		if err != nil || len(cs) != 1 || cs[0].Name != "forever" {
			t.Fatalf("claims %+v %v", cs, err)
		}
		res, _ := never.Queue().Expire(ctx, nil)
		if len(res.Jobs) != 1 || res.Jobs[0].Name != "hour" {
			t.Fatalf("expired %+v", res.Jobs)
		}
		wantStatus(t, never, cr.Jobs["hour"], kiln.JobTimedOutStale)
	}, storetest.ReleaseWith(release))
}
