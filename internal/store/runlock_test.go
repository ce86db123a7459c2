package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// A completion takes its run's lock before it touches its job's row, in
// the statement that ends the job (one round trip for both): a transaction
// holding the run's lock — the engine cancelling the run, say — may still
// change the job while the completion waits for the lock, so neither waits
// for the other; once the lock is free, the completion ends the job as it
// is then.
// Proves B156 (docs/behaviours.md).
func TestACompletionLocksItsRunBeforeItsJob(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("run locks are PostgreSQL's: SQLite has one writer")
		}
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		ca := claimJob(t, db, "agent-1", cr.Jobs["a"])
		holder, err := db.SQL().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Rollback()
		if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", cr.ID); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			errs, _, err := db.Jobs().CompleteBatch(ctx, []store.Completion{{Lease: lease(ca), Status: kiln.JobSuccess, Started: true}})
			if err == nil {
				err = errs[0]
			}
			done <- err
		}()
		waitForLockWaiter(t, db)
		// Shorter than PostgreSQL's deadlock_timeout (1 s), which would
		// otherwise end a wait for the job's row by aborting the
		// completion, whose retry then waits for the lock as it should.
		if _, err := holder.ExecContext(ctx, "SET LOCAL lock_timeout = '500ms'"); err != nil {
			t.Fatal(err)
		}
		if _, err := holder.ExecContext(ctx, "UPDATE jobs SET updated_at = updated_at + 1 WHERE id = $1", ca.JobID); err != nil {
			t.Fatalf("the run's lock holder waited for the completing job's row: %v", err)
		}
		select {
		case err := <-done:
			t.Fatalf("the completion did not wait for its run's lock (err %v)", err)
		default:
		}
		if err := holder.Commit(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the completion still waits after the run's lock was released")
		}
		wantStatus(t, db, ca.JobID, kiln.JobSuccess)
		wantRunStatus(t, db, cr.ID, kiln.RunRunning) // b is still queued
	})
}

// waitForLockWaiter returns once a session of db's database waits for an
// advisory lock.
func waitForLockWaiter(t *testing.T, db *store.DB) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		var n int
		if err := db.SQL().QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
	}
	t.Fatal("no session waits for a run's lock")
}

// The settle rides in the completion's own statement (B217): of a batch's
// successes asking to settle, one whose job has an upload in flight is left
// out, unstored, and answered ErrUnsettled; the others end; a stale lease
// is refused as stale, uploads or not; a success not asking to settle ends
// whatever its job uploads; and once the upload ended, the success left out
// ends too.
// Proves B217 (docs/behaviours.md).
func TestCompleteBatchLeavesOutSuccessesWithUploadsInFlight(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b"), job("c"), job("d")))
		cs := claimEach(t, db, cr, "a", "b", "c", "d")
		ca, cb, cc, cd := cs[0], cs[1], cs[2], cs[3]
		for _, c := range []store.Claimed{ca, cc, cd} {
			if err := db.Uploads().Begin(ctx, "up-"+c.JobID, c.JobID, "cache", "deps"); err != nil {
				t.Fatal(err)
			}
		}
		stale := lease(cc)
		stale.Epoch++
		errs, _, err := db.Jobs().CompleteBatch(ctx, []store.Completion{
			{Lease: lease(ca), Status: kiln.JobSuccess, Settle: true},
			{Lease: lease(cb), Status: kiln.JobSuccess, Settle: true},
			{Lease: stale, Status: kiln.JobSuccess, Settle: true},
			{Lease: lease(cd), Status: kiln.JobSuccess},
		})
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(errs[0], store.ErrUnsettled) || errs[1] != nil || !errors.Is(errs[2], store.ErrStaleLease) || errs[3] != nil {
			t.Fatalf("errs %v; want unsettled, nil, stale, nil", errs)
		}
		wantStatus(t, db, ca.JobID, kiln.JobDispatched)
		wantStatus(t, db, cb.JobID, kiln.JobSuccess)
		wantStatus(t, db, cc.JobID, kiln.JobDispatched)
		wantStatus(t, db, cd.JobID, kiln.JobSuccess)
		if err := db.Uploads().End(ctx, "up-"+ca.JobID); err != nil {
			t.Fatal(err)
		}
		errs, _, err = db.Jobs().CompleteBatch(ctx, []store.Completion{{Lease: lease(ca), Status: kiln.JobSuccess, Settle: true}})
		if err != nil || errs[0] != nil {
			t.Fatalf("after the upload ended: %v %v", errs, err)
		}
		wantStatus(t, db, ca.JobID, kiln.JobSuccess)
	})
}
