package store_test

import (
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
