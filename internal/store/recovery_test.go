package store_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// An unacknowledged dispatch is requeued by the ack sweep, its attempt
// counted; after MaxAttempts dispatches the job fails with a reason naming
// the attempts.
// Proves B30 and B31 (docs/behaviours.md).
func TestAckTimeoutRequeueCountsAttempts(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b", need("a"))))
		id := cr.Jobs["a"]
		for attempt := 1; attempt <= store.DefaultMaxAttempts; attempt++ {
			c := claimJob(t, db, fmt.Sprintf("agent-%d", attempt), id)
			if c.Attempt != attempt || c.Epoch != int64(attempt) {
				t.Fatalf("attempt %d: claimed %+v", attempt, c)
			}
			// Not yet due.
			clock.Advance(store.DefaultAckTimeout - time.Millisecond)
			if res, _ := db.Queue().SweepAckTimeouts(ctx); len(res.Jobs) != 0 {
				t.Fatalf("swept before the deadline: %+v", res.Jobs)
			}
			clock.Advance(time.Millisecond)
			res, err := db.Queue().SweepAckTimeouts(ctx)
			if err != nil || len(res.Jobs) != 1 {
				t.Fatalf("attempt %d: sweep %+v %v", attempt, res.Jobs, err)
			}
			sj := res.Jobs[0]
			if sj.AgentID != fmt.Sprintf("agent-%d", attempt) || sj.Epoch != c.Epoch {
				t.Fatalf("swept %+v", sj)
			}
			if attempt < store.DefaultMaxAttempts {
				j := wantStatus(t, db, id, kiln.JobQueued)
				if sj.Status != kiln.JobQueued || j.AgentID != "" || j.Attempts != attempt ||
					!strings.Contains(j.PendingReason, "did not acknowledge") {
					t.Fatalf("after attempt %d: %+v", attempt, j)
				}
				continue
			}
			j := wantStatus(t, db, id, kiln.JobFailed)
			if sj.Status != kiln.JobFailed || !strings.Contains(j.Error, "gave up after 5 dispatch attempts") {
				t.Fatalf("final: %q", j.Error)
			}
			if len(res.Finished) < 2 {
				t.Fatalf("the dependent was not settled: %+v", res.Effects)
			}
		}
		wantStatus(t, db, cr.Jobs["b"], kiln.JobSkipped)
		wantRunStatus(t, db, cr.ID, kiln.RunFailed)
	})
}

// An acked or started job is left alone by the ack sweep; the queue timeout
// restarts when a job is requeued.
func TestAckClearsDeadline(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		ca := claimJob(t, db, "agent-1", cr.Jobs["a"])
		cb := claimJob(t, db, "agent-1", cr.Jobs["b"])
		if err := db.Jobs().Ack(ctx, lease(ca)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour - time.Second)
		res, _ := db.Queue().SweepAckTimeouts(ctx)
		if len(res.Jobs) != 1 || res.Jobs[0].JobID != cb.JobID {
			t.Fatalf("swept %+v", res.Jobs)
		}
		j := wantStatus(t, db, cb.JobID, kiln.JobQueued)
		if !j.ExpiresAt.Equal(clock.Now().Add(time.Hour)) {
			t.Fatalf("requeued job expires at %v, want an hour from now", j.ExpiresAt)
		}
		wantStatus(t, db, ca.JobID, kiln.JobDispatched)
	})
}

// Reject (Requeue) counts attempts like the ack sweep does.
// Proves B31 (docs/behaviours.md).
func TestRequeueReject(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a")))
		var res store.SweepResult
		for i := 0; i < store.DefaultMaxAttempts; i++ {
			c := claimJob(t, db, "agent-1", cr.Jobs["a"])
			var err error
			res, err = db.Queue().Requeue(ctx, lease(c), "agent busy")
			if err != nil {
				t.Fatal(err)
			}
		}
		if len(res.Jobs) != 1 || res.Jobs[0].Status != kiln.JobFailed {
			t.Fatalf("last requeue %+v", res.Jobs)
		}
		j := wantStatus(t, db, cr.Jobs["a"], kiln.JobFailed)
		if j.Error != "agent busy; gave up after 5 dispatch attempts" {
			t.Fatalf("error %q", j.Error)
		}
	})
}

// A stop mark beats a racing requeue: a cancelled job is never re-pended.
// Proves B23 (docs/behaviours.md).
func TestStopMarkBeatsRequeue(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a")))
		c := claimJob(t, db, "agent-1", cr.Jobs["a"])
		res, err := db.Runs().Cancel(ctx, cr.ID, "user", false)
		if err != nil || len(res.Cancelling) != 1 {
			t.Fatalf("cancel %+v %v", res, err)
		}
		// The agent rejects the dispatch it never started (or its ack times out).
		clock.Advance(store.DefaultAckTimeout)
		rq, err := db.Queue().Requeue(ctx, lease(c), "agent busy")
		if err != nil || len(rq.Jobs) != 1 || rq.Jobs[0].Status != kiln.JobCancelled {
			t.Fatalf("requeue of a stopped job: %+v %v", rq.Jobs, err)
		}
		j := wantStatus(t, db, cr.Jobs["a"], kiln.JobCancelled)
		if !j.Stopped {
			t.Fatal("no stop mark")
		}
		wantRunStatus(t, db, cr.ID, kiln.RunCancelled)
		if cs, _ := db.Queue().Claim(ctx, "agent-2", linux, 5); len(cs) != 0 {
			t.Fatalf("a cancelled job was claimed: %+v", cs)
		}
	})
}

// Cancels and requeues racing on many jobs (concurrent transactions on
// PostgreSQL) never leave a cancelled run's job queued or dispatched.
// Proves B23 (docs/behaviours.md).
func TestStopMarkRace(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		const n = 40
		type pair struct {
			run string
			c   store.Claimed
		}
		var ps []pair
		for i := 0; i < n; i++ {
			cr := mustCreate(t, db, newRun(job("a")))
			ps = append(ps, pair{cr.ID, claimJob(t, db, "agent-1", cr.Jobs["a"])})
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		for _, p := range ps {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := db.Runs().Cancel(ctx, p.run, "user", false); err != nil && !errors.Is(err, store.ErrConflict) {
					errs <- err
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := db.Queue().Requeue(ctx, lease(p.c), "agent busy"); err != nil &&
					!errors.Is(err, store.ErrStaleLease) && !errors.Is(err, store.ErrConflict) {
					errs <- err
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		for _, p := range ps {
			j := mustJob(t, db, p.c.JobID)
			if j.Status != kiln.JobCancelled {
				t.Fatalf("job of a cancelled run is %s", j.Status)
			}
			wantRunStatus(t, db, p.run, kiln.RunCancelled)
		}
	})
}

// The recovery window: a lost agent's jobs wait; a reconnect with the same
// epoch takes them back; unlisted ones are resolved at once.
// Proves B52 (docs/behaviours.md).
func TestAgentLostAndReconnect(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("started"), job("unstarted"), job("forgotten"), job("other")))
		cs := claimJob(t, db, "a1", cr.Jobs["started"])
		cu := claimJob(t, db, "a1", cr.Jobs["unstarted"])
		cf := claimJob(t, db, "a1", cr.Jobs["forgotten"])
		co := claimJob(t, db, "a2", cr.Jobs["other"])
		if err := db.Jobs().Start(ctx, lease(cs)); err != nil {
			t.Fatal(err)
		}
		res, err := db.Queue().AgentLost(ctx, "a1")
		if err != nil || len(res.Jobs) != 3 {
			t.Fatalf("agent lost: %+v %v", res.Jobs, err)
		}
		for _, id := range []string{cs.JobID, cu.JobID, cf.JobID} {
			j := wantStatus(t, db, id, kiln.JobRecovering)
			if j.AgentID != "a1" {
				t.Fatalf("recovering job lost its agent id: %+v", j)
			}
		}
		wantStatus(t, db, co.JobID, kiln.JobDispatched)
		// A late report from the lost agent is refused.
		if err := db.Jobs().Start(ctx, lease(cu)); !errors.Is(err, store.ErrStaleLease) {
			t.Fatalf("start while recovering: %v", err)
		}
		stale := lease(cs)
		stale.Epoch--
		rr, err := db.Queue().Reconnect(ctx, "a1", []store.Lease{lease(cs), lease(cu), stale, lease(co)})
		if err != nil {
			t.Fatal(err)
		}
		if len(rr.Kept) != 2 || len(rr.Refused) != 2 || len(rr.Resolved) != 1 || rr.Resolved[0].JobID != cf.JobID {
			t.Fatalf("reconnect %+v", rr)
		}
		wantStatus(t, db, cs.JobID, kiln.JobRunning)
		wantStatus(t, db, cu.JobID, kiln.JobDispatched)
		j := wantStatus(t, db, cf.JobID, kiln.JobQueued)
		if j.Attempts != 1 {
			t.Fatalf("forgotten job attempts %d", j.Attempts)
		}
		// The kept leases work.
		complete(t, db, cs, kiln.JobSuccess)
		if err := db.Jobs().Start(ctx, lease(cu)); err != nil {
			t.Fatal(err)
		}
	})
}

// The recovery sweep: a job that never started is requeued; a started job
// with on_agent_lost retry is requeued once and ends agent_lost on a second
// loss; with fail it ends agent_lost at once.
// Proves B53 (docs/behaviours.md).
func TestRecoverySweep(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		fail := job("fail")
		fail.OnAgentLost = store.AgentLostFail
		cr := mustCreate(t, db, newRun(job("unstarted"), job("retry"), fail))
		cu := claimJob(t, db, "a1", cr.Jobs["unstarted"])
		cr1 := claimJob(t, db, "a1", cr.Jobs["retry"])
		cf := claimJob(t, db, "a1", cr.Jobs["fail"])
		for _, c := range []store.Claimed{cr1, cf} {
			if err := db.Jobs().Start(ctx, lease(c)); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.Jobs().UpdateSteps(ctx, lease(cr1), store.StepUpdate{Index: 0, Status: kiln.StepSuccess}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Queue().AgentLost(ctx, "a1"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(store.DefaultRecoveryWindow - time.Millisecond)
		if res, _ := db.Queue().SweepRecovery(ctx); len(res.Jobs) != 0 {
			t.Fatalf("swept inside the window: %+v", res.Jobs)
		}
		clock.Advance(time.Millisecond)
		res, err := db.Queue().SweepRecovery(ctx)
		if err != nil || len(res.Jobs) != 3 {
			t.Fatalf("sweep %+v %v", res.Jobs, err)
		}
		wantStatus(t, db, cu.JobID, kiln.JobQueued)
		j := wantStatus(t, db, cr1.JobID, kiln.JobQueued)
		if j.Steps[0].Status != kiln.StepPending || !j.StartedAt.IsZero() {
			t.Fatalf("retried job kept its last attempt: %+v", j)
		}
		j = wantStatus(t, db, cf.JobID, kiln.JobAgentLost)
		if !strings.Contains(j.Error, "on_agent_lost: fail") {
			t.Fatalf("agent_lost error %q", j.Error)
		}
		// The retried job is lost a second time: agent_lost.
		c2 := claimJob(t, db, "a2", cu.JobID)
		c3 := claimJob(t, db, "a2", cr1.JobID)
		if err := db.Jobs().Start(ctx, lease(c3)); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Queue().AgentLost(ctx, "a2"); err != nil {
			t.Fatal(err)
		}
		clock.Advance(store.DefaultRecoveryWindow)
		if _, err := db.Queue().SweepRecovery(ctx); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, db, c2.JobID, kiln.JobQueued)
		j = wantStatus(t, db, c3.JobID, kiln.JobAgentLost)
		if !strings.Contains(j.Error, "cannot be retried again") {
			t.Fatalf("second loss error %q", j.Error)
		}
	})
}

// The stale detector ends running jobs whose heartbeat is too old.
// Proves B49 (docs/behaviours.md).
func TestStaleDetector(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("quiet"), job("alive")))
		cq := claimJob(t, db, "a1", cr.Jobs["quiet"])
		ca := claimJob(t, db, "a2", cr.Jobs["alive"])
		for _, c := range []store.Claimed{cq, ca} {
			if err := db.Jobs().Start(ctx, lease(c)); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(store.DefaultStaleAfter / 2)
		if stale, err := db.Jobs().Heartbeat(ctx, lease(ca)); err != nil || len(stale) != 0 {
			t.Fatalf("heartbeat %v %v", stale, err)
		}
		clock.Advance(store.DefaultStaleAfter/2 + time.Millisecond)
		res, err := db.Queue().SweepStale(ctx)
		if err != nil || len(res.Jobs) != 1 || res.Jobs[0].JobID != cq.JobID || res.Jobs[0].AgentID != "a1" {
			t.Fatalf("stale sweep %+v %v", res.Jobs, err)
		}
		j := wantStatus(t, db, cq.JobID, kiln.JobTimedOutStale)
		if j.Error != "no heartbeat from the agent for more than 2m0s" {
			t.Fatalf("error %q", j.Error)
		}
		wantStatus(t, db, ca.JobID, kiln.JobRunning)
		// The stale agent's late completion is refused.
		if _, err := db.Jobs().Complete(ctx, store.Completion{Lease: lease(cq), Status: kiln.JobSuccess}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("late completion: %v", err)
		}
	})
}

// HoldRecovery lengthens the recovery of one agent's recovering jobs, never
// shortens it, and leaves other agents' jobs alone: a restarted
// orchestrator gives the previous process's jobs drop_after + the window.
// Proves B127.
func TestHoldRecoveryOnlyLengthensTheAgentsWindow(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("held"), job("other")))
		ch := claimJob(t, db, "a1", cr.Jobs["held"])
		co := claimJob(t, db, "a2", cr.Jobs["other"])
		for _, c := range []store.Claimed{ch, co} {
			if err := db.Jobs().Start(ctx, lease(c)); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range []string{"a1", "a2"} {
			if _, err := db.Queue().AgentLost(ctx, a); err != nil {
				t.Fatal(err)
			}
		}
		hold := 3 * store.DefaultRecoveryWindow
		if err := db.Queue().HoldRecovery(ctx, "a1", clock.Now().Add(hold)); err != nil {
			t.Fatal(err)
		}
		// A shorter hold changes nothing.
		if err := db.Queue().HoldRecovery(ctx, "a1", clock.Now().Add(time.Second)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(store.DefaultRecoveryWindow)
		res, err := db.Queue().SweepRecovery(ctx)
		if err != nil || len(res.Jobs) != 1 || res.Jobs[0].JobID != co.JobID {
			t.Fatalf("after the window: swept %+v %v, want only the other agent's job", res.Jobs, err)
		}
		wantStatus(t, db, ch.JobID, kiln.JobRecovering)
		clock.Advance(hold - store.DefaultRecoveryWindow - time.Millisecond)
		if res, _ := db.Queue().SweepRecovery(ctx); len(res.Jobs) != 0 {
			t.Fatalf("swept inside the hold: %+v", res.Jobs)
		}
		clock.Advance(time.Millisecond)
		if res, _ := db.Queue().SweepRecovery(ctx); len(res.Jobs) != 1 {
			t.Fatalf("not swept at the end of the hold: %+v", res.Jobs)
		}
		wantStatus(t, db, ch.JobID, kiln.JobQueued)
	})
}
