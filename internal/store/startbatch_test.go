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
		ca := claimJob(t, db, "agent-1", cr.Jobs["a"])
		cb := claimJob(t, db, "agent-2", cr.Jobs["b"])
		cc := claimJob(t, db, "agent-3", cr.Jobs["c"])
		cd := claimJob(t, db, "agent-4", cr.Jobs["d"])
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
