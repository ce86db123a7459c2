package store_test

import (
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestSmoke(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("lint"), job("test", need("lint"))))
		if cr.Number != 1 {
			t.Fatalf("number %d", cr.Number)
		}
		wantStatus(t, db, cr.Jobs["lint"], kiln.JobQueued)
		wantStatus(t, db, cr.Jobs["test"], kiln.JobPending)
		runJob(t, db, cr.Jobs["lint"], kiln.JobSuccess)
		wantStatus(t, db, cr.Jobs["test"], kiln.JobQueued)
		runJob(t, db, cr.Jobs["test"], kiln.JobSuccess)
		wantRunStatus(t, db, cr.ID, kiln.RunSuccess)
	})
}
