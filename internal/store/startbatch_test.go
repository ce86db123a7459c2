package store_test

import (
	"errors"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Starts of several agents' jobs move in one statement, each under its
// own lease: a start moves its job (and its run, still pending, with it),
// a start repeated in the batch or after it is a no-op, and a stale lease
// or a job no longer held is refused without failing the others.
func TestStartBatch(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b"), job("c"), job("d")))
		cs := claimEach(t, db, cr, "a", "b", "c", "d")
		ca, cb, cc, cd := cs[0], cs[1], cs[2], cs[3]
		complete(t, db, cd, kiln.JobSuccess) // no longer held
		stale := lease(cc)
		stale.Epoch++
		leases := []store.Lease{lease(ca), lease(cb), lease(ca), stale, lease(cd), {JobID: "no-such-job", Epoch: 1}}
		errs, err := db.Jobs().StartBatch(ctx, leases)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []error{nil, nil, nil, store.ErrStaleLease, store.ErrConflict, store.ErrNotFound} {
			if want == nil && errs[i] != nil || want != nil && !errors.Is(errs[i], want) {
				t.Errorf("lease %d (%+v): %v, want %v", i, leases[i], errs[i], want)
			}
		}
		wantStatus(t, db, ca.JobID, kiln.JobRunning)
		wantStatus(t, db, cb.JobID, kiln.JobRunning)
		wantStatus(t, db, cc.JobID, kiln.JobDispatched)
		wantRunStatus(t, db, cr.ID, kiln.RunRunning)
		// Repeated after its commit: still a no-op.
		if errs, err := db.Jobs().StartBatch(ctx, []store.Lease{lease(cb), lease(cc)}); err != nil || errs[0] != nil || errs[1] != nil {
			t.Fatalf("second batch: %v %v", errs, err)
		}
		wantStatus(t, db, cc.JobID, kiln.JobRunning)
	})
}

// A start handed in with its job's end (the fleet had both in one batch)
// is stored by the end's one update: the job goes from dispatched to its
// end with its start time set, and its run, still pending, starts (B252);
// a completion without it leaves a job that never started without a
// start time, and a stale lease refuses both.
// Proves B155 (docs/behaviours.md).
func TestAStartRidingWithItsEndIsStoredByIt(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b"), job("c")))
		cs := claimEach(t, db, cr, "a", "b", "c")
		ca, cb, cc := cs[0], cs[1], cs[2]
		unstartRun(t, db, cr.ID)
		clock.Advance(sec(2))
		stale := lease(cb)
		stale.Epoch++
		errs, eff, err := db.Jobs().CompleteBatch(ctx, []store.Completion{
			{Lease: lease(ca), Status: kiln.JobSuccess, Started: true},
			{Lease: stale, Status: kiln.JobSuccess, Started: true},
			{Lease: lease(cc), Status: kiln.JobFailed, Error: "could not start"},
		})
		if err != nil {
			t.Fatal(err)
		}
		if errs[0] != nil || !errors.Is(errs[1], store.ErrStaleLease) || errs[2] != nil {
			t.Fatalf("errs %v", errs)
		}
		if j := wantStatus(t, db, ca.JobID, kiln.JobSuccess); !j.StartedAt.Equal(clock.Now()) || !j.FinishedAt.Equal(clock.Now()) {
			t.Fatalf("a: started %v, finished %v; want both %v", j.StartedAt, j.FinishedAt, clock.Now())
		}
		if j := wantStatus(t, db, cb.JobID, kiln.JobDispatched); !j.StartedAt.IsZero() {
			t.Fatalf("b, refused, has a start time %v", j.StartedAt)
		}
		if j := wantStatus(t, db, cc.JobID, kiln.JobFailed); !j.StartedAt.IsZero() {
			t.Fatalf("c never started but has a start time %v", j.StartedAt)
		}
		if r := wantRunStatus(t, db, cr.ID, kiln.RunRunning); !r.StartedAt.Equal(clock.Now()) {
			t.Fatalf("run started at %v, want %v", r.StartedAt, clock.Now())
		}
		started := false
		for _, rc := range eff.Runs {
			started = started || rc.ID == cr.ID && rc.Status == kiln.RunRunning
		}
		if !started {
			t.Fatalf("no effect tells the run started: %+v", eff.Runs)
		}
		// The last job's end, its start riding along, ends the run.
		if _, _, err := db.Jobs().CompleteBatch(ctx, []store.Completion{{Lease: lease(cb), Status: kiln.JobSuccess, Started: true}}); err != nil {
			t.Fatal(err)
		}
		wantRunStatus(t, db, cr.ID, kiln.RunFailed)
	})
}
