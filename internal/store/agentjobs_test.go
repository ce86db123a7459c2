package store_test

import (
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The agent list carries each agent's registered max_jobs and the jobs the
// database says it holds (dispatched, running or cancelling), so every
// server shows the cluster's agents with their slots.
//
// B135.
func TestListAgentsCountsTheJobsEachHolds(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		for _, r := range []store.AgentRecord{{ID: "x", MaxJobs: 4}, {ID: "y"}} {
			r.Labels = kiln.AgentLabels{Labels: kiln.NewLabels("linux")}
			if err := a.UpsertAgent(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		mustCreate(t, db, newRun(job("a"), job("b"), job("c")))
		first := claimOne(t, db, "x")
		claimOne(t, db, "x")
		if err := db.Jobs().Start(ctx, lease(first)); err != nil {
			t.Fatal(err)
		}
		want := func(x, y int) {
			t.Helper()
			recs, err := a.ListAgents(ctx)
			if err != nil || len(recs) != 2 {
				t.Fatalf("%+v %v", recs, err)
			}
			if recs[0].MaxJobs != 4 || recs[0].ActiveJobs != x || recs[1].MaxJobs != 0 || recs[1].ActiveJobs != y {
				t.Fatalf("x %d/%d, y %d/%d; want x %d/4, y %d/0", recs[0].ActiveJobs, recs[0].MaxJobs, recs[1].ActiveJobs, recs[1].MaxJobs, x, y)
			}
		}
		want(2, 0)
		complete(t, db, first, kiln.JobSuccess)
		want(1, 0)
	})
}
