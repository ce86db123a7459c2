package store_test

import (
	"context"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The roll-up check of jobs ended with DeferRollUps rides in the next
// claim's statement (B158): a run whose last job ended is ended, one with
// a job still open is not, the claim gets its job, and FlushRollUps
// reports the ended run (CompleteBatch does where nothing was carried);
// with no claim to carry it, FlushRollUps runs the
// check itself; and a check nobody flushed still runs before the commit.
// On SQLite, where nothing is carried, the same holds.
// Proves B158 (docs/behaviours.md).
func TestARollUpCheckRidesInTheNextClaim(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		endAndMaybeClaim := func(claim, flush bool) (done, open store.CreatedRun, claimed []store.Claimed, eff store.Effects) {
			t.Helper()
			done = mustCreate(t, db, newRun(job("only")))
			open = mustCreate(t, db, newRun(job("a"), job("b")))
			cd := claimJob(t, db, "agent-1", done.Jobs["only"])
			ca := claimJob(t, db, "agent-2", open.Jobs["a"])
			err := db.Update(ctx, func(tx *store.Tx) error {
				tx.DeferRollUps()
				errs, ended, err := tx.Jobs().CompleteBatch(ctx, []store.Completion{
					{Lease: lease(cd), Status: kiln.JobSuccess}, {Lease: lease(ca), Status: kiln.JobSuccess}})
				if err != nil || errs[0] != nil || errs[1] != nil {
					t.Fatalf("complete: %v %v", errs, err)
				}
				eff = ended
				if claim {
					got, err := tx.Queue().ClaimFor(ctx, []store.ClaimAsk{{AgentID: "agent-2", Labels: linux, Slots: 1}})
					if err != nil {
						return err
					}
					claimed = got[0]
					// The claim's statement carried the check: the run
					// is ended before anything is flushed.
					if r, err := tx.Runs().Get(ctx, done.ID); err != nil || r.Status != kiln.RunSuccess {
						t.Fatalf("after the claim: run %s %v (%v), want success", done.ID, r.Status, err)
					}
				}
				if flush {
					rolled, err := tx.FlushRollUps(context.Background())
					eff.Runs = append(eff.Runs, rolled.Runs...)
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			return done, open, claimed, eff
		}
		endedRun := func(eff store.Effects, id string) bool {
			for _, rc := range eff.Runs {
				if rc.ID == id && rc.Status == kiln.RunSuccess {
					return true
				}
			}
			return false
		}
		for _, c := range []struct {
			name         string
			claim, flush bool
		}{{"carried by the claim", true, true}, {"no claim", false, true}, {"carried, never flushed", true, false}, {"neither carried nor flushed", false, false}} {
			done, open, claimed, eff := endAndMaybeClaim(c.claim, c.flush)
			wantRunStatus(t, db, done.ID, kiln.RunSuccess)
			wantRunStatus(t, db, open.ID, kiln.RunRunning)
			wantStatus(t, db, done.Jobs["only"], kiln.JobSuccess)
			if c.claim && (len(claimed) != 1 || claimed[0].JobID != open.Jobs["b"]) {
				t.Fatalf("%s: claimed %+v, want %s", c.name, claimed, open.Jobs["b"])
			}
			if c.flush && (!endedRun(eff, done.ID) || endedRun(eff, open.ID)) {
				t.Fatalf("%s: CompleteBatch and FlushRollUps reported %+v; want %s ended and %s not", c.name, eff.Runs, done.ID, open.ID)
			}
			// The open run's last job ends it, carried or not.
			cb := claimed
			if !c.claim {
				cb = []store.Claimed{claimJob(t, db, "agent-3", open.Jobs["b"])}
			}
			complete(t, db, cb[0], kiln.JobSuccess)
			wantRunStatus(t, db, open.ID, kiln.RunSuccess)
		}
	})
}
