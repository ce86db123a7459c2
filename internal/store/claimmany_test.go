package store_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// TestClaimForServesEachAskInOrder: several agents' claims in one call (one
// statement on PostgreSQL for agents accepting the same keys) hand out the
// oldest jobs in ask order, each job once, and nothing an agent cannot run.
func TestClaimForServesEachAskInOrder(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		var jobs []store.NewJob
		for i := 0; i < 10; i++ {
			jobs = append(jobs, job(fmt.Sprintf("j%02d", i)))
		}
		cr := mustCreate(t, db, newRun(jobs...))
		gpuOnly := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "gpu"), Mandatory: kiln.NewLabels("gpu")}
		asks := []store.ClaimAsk{
			{AgentID: "a", Labels: linux, Slots: 2},
			{AgentID: "gpu", Labels: gpuOnly, Slots: 5}, // takes only jobs asking for gpu: none
			{AgentID: "b", Labels: linux, Slots: 3},
			{AgentID: "lost", Labels: linux, Slots: 0},
			{AgentID: "c", Labels: linux, Slots: 10},
		}
		got := claimFor(t, db, asks)
		want := map[string]int{"a": 2, "gpu": 0, "b": 3, "lost": 0, "c": 5}
		seen := map[string]string{}
		var order []string // job names in ask order
		for i, a := range asks {
			if len(got[i]) != want[a.AgentID] {
				t.Fatalf("agent %s got %d jobs, want %d", a.AgentID, len(got[i]), want[a.AgentID])
			}
			for _, c := range got[i] {
				if prev, dup := seen[c.JobID]; dup {
					t.Fatalf("job %s claimed by %s and %s", c.Name, prev, a.AgentID)
				}
				seen[c.JobID] = a.AgentID
				order = append(order, c.Name)
				if j := mustJob(t, db, c.JobID); j.Status != kiln.JobDispatched || j.AgentID != a.AgentID {
					t.Fatalf("job %s is %s on %q, want dispatched on %s", c.Name, j.Status, j.AgentID, a.AgentID)
				}
			}
		}
		if len(seen) != len(cr.Jobs) {
			t.Fatalf("%d of %d jobs claimed", len(seen), len(cr.Jobs))
		}
		// The first asks get the oldest jobs.
		if !slices.Equal(order[:5], []string{"j00", "j01", "j02", "j03", "j04"}) {
			t.Fatalf("claim order %v", order)
		}
		// A key the cached set does not know yet (the job was queued a moment
		// ago) is still found for an ask it leaves short.
		docker := store.NewJob{Name: "d", Requirement: kiln.Requirement{RunsOn: kiln.NewLabels("linux", "docker")}}
		mustCreate(t, db, newRun(docker))
		withDocker := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "docker")}
		got = claimFor(t, db, []store.ClaimAsk{{AgentID: "d1", Labels: withDocker, Slots: 1}})
		if len(got[0]) != 1 || got[0][0].Name != "d" {
			t.Fatalf("the new key's job was not claimed: %+v", got)
		}
		// An ask without an agent is refused.
		err := db.Update(ctx, func(tx *store.Tx) error {
			_, err := tx.Queue().ClaimFor(ctx, []store.ClaimAsk{{Labels: linux, Slots: 1}})
			return err
		})
		if err == nil {
			t.Fatal("an ask without an agent id was accepted")
		}
	})
}

// claimFor runs ClaimFor in a transaction of its own.
func claimFor(t *testing.T, db *store.DB, asks []store.ClaimAsk) [][]store.Claimed {
	t.Helper()
	var got [][]store.Claimed
	err := db.Update(ctx, func(tx *store.Tx) error {
		var err error
		got, err = tx.Queue().ClaimFor(ctx, asks)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestClaimForSharedStatementNamesEachAgent: in one shared claim, an
// agent asking twice (two of its jobs ended in one batch) fills its asks
// in order, every job is leased, recorded on the timeline and handed to
// the agent that claimed it, and the run the claim starts is reported
// started once.
func TestClaimForSharedStatementNamesEachAgent(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("j0"), job("j1"), job("j2"), job("j3"), job("j4")))
		asks := []store.ClaimAsk{
			{AgentID: "a", Labels: linux, Slots: 1},
			{AgentID: "b", Labels: linux, Slots: 1},
			{AgentID: "a", Labels: linux, Slots: 2},
		}
		got := claimFor(t, db, asks)
		want := [][]string{{"j0"}, {"j1"}, {"j2", "j3"}}
		started := 0
		names := map[string]string{}
		var timeline []string
		for i, a := range asks {
			var gotNames []string
			for _, c := range got[i] {
				gotNames = append(gotNames, c.Name)
				names[c.JobID] = c.Name
				if c.RunStarted {
					started++
				}
				if c.Epoch != 1 || c.Attempt != 1 || c.AckDeadline.IsZero() {
					t.Fatalf("%s: epoch %d, attempt %d, ack deadline %v", c.Name, c.Epoch, c.Attempt, c.AckDeadline)
				}
				if j := mustJob(t, db, c.JobID); j.Status != kiln.JobDispatched || j.AgentID != a.AgentID {
					t.Fatalf("job %s is %s on %q, want dispatched on %s", c.Name, j.Status, j.AgentID, a.AgentID)
				}
			}
			if !slices.Equal(gotNames, want[i]) {
				t.Fatalf("ask %d (%s) got %v, want %v", i, a.AgentID, gotNames, want[i])
			}
		}
		if started != 1 {
			t.Fatalf("%d claims report the run started, want 1", started)
		}
		if r := mustRun(t, db, cr.ID); r.Status != kiln.RunRunning {
			t.Fatalf("run is %s after its first claims", r.Status)
		}
		evs, err := db.Runs().Timeline(ctx, cr.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == store.EventDispatched {
				timeline = append(timeline, names[ev.JobID]+" "+ev.Detail)
			}
		}
		slices.Sort(timeline)
		if !slices.Equal(timeline, []string{
			"j0 attempt 1 sent to agent a", "j1 attempt 1 sent to agent b",
			"j2 attempt 1 sent to agent a", "j3 attempt 1 sent to agent a",
		}) {
			t.Fatalf("timeline %q", timeline)
		}
	})
}

// TestReleaseWritesEachJobsOwnSpec: jobs released together (the
// dependents of one job) are queued a few statements at a time, each with
// the spec the Releaser rendered for it, across the statement-size
// boundary; root jobs are written with theirs.
func TestReleaseWritesEachJobsOwnSpec(t *testing.T) {
	render := func(rj store.ReadyJob) store.Release {
		return store.Release{Spec: json.RawMessage(fmt.Sprintf(`{"for":%q}`, rj.Name))}
	}
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		jobs := []store.NewJob{job("gate")}
		for i := 0; i < 450; i++ {
			jobs = append(jobs, job(fmt.Sprintf("j%03d", i), need("gate")))
		}
		cr := mustCreate(t, db, newRun(jobs...))
		if len(cr.Queued) != 1 {
			t.Fatalf("%d jobs queued, want 1", len(cr.Queued))
		}
		eff := complete(t, db, claimJob(t, db, "agent-1", cr.Jobs["gate"]), kiln.JobSuccess)
		if len(eff.Queued) != 450 {
			t.Fatalf("%d jobs queued, want 450", len(eff.Queued))
		}
		for name, id := range cr.Jobs {
			j := mustJob(t, db, id)
			if name != "gate" && j.Status != kiln.JobQueued || string(j.Spec) != fmt.Sprintf(`{"for":%q}`, name) {
				t.Fatalf("job %s: %s with spec %s", name, j.Status, j.Spec)
			}
		}
	}, storetest.ReleaseWith(render))
}

// A claim says when each job entered the queue, whichever way it is
// claimed, so the fleet times a dispatch it never saw queued.
func TestClaimsReturnTheQueueTime(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		queued := clock.Now().Truncate(time.Millisecond)
		cr := mustCreate(t, db, newRun(job("a"), job("b"), job("c"), job("d")))
		clock.Advance(3 * time.Second)
		check := func(how string, cs []store.Claimed, err error) {
			t.Helper()
			if err != nil || len(cs) != 1 {
				t.Fatalf("%s: %+v %v", how, cs, err)
			}
			if !cs[0].QueuedAt.Equal(queued) {
				t.Fatalf("%s: queued at %v, want %v", how, cs[0].QueuedAt, queued)
			}
		}
		cs, err := db.Queue().Claim(ctx, "agent-1", linux, 1)
		check("Claim", cs, err)
		got, err := db.Queue().ClaimFor(ctx, []store.ClaimAsk{{AgentID: "agent-2", Labels: linux, Slots: 1}})
		if err == nil && len(got) != 1 {
			t.Fatalf("ClaimFor: %+v", got)
		}
		check("ClaimFor", got[0], err)
		err = db.Update(ctx, func(tx *store.Tx) error {
			got, err = tx.Queue().ClaimFor(ctx, []store.ClaimAsk{{AgentID: "agent-3", Labels: linux, Slots: 1}})
			return err
		})
		check("ClaimFor in a transaction", got[0], err)
		c, err := db.Queue().ClaimJob(ctx, "agent-4", linux, cr.Jobs["d"])
		if err != nil || c == nil {
			t.Fatalf("ClaimJob: %+v %v", c, err)
		}
		check("ClaimJob", []store.Claimed{*c}, nil)
	})
}

// A claim in the transaction that created a run (a webhook's inline claim)
// finds the keys the run queued without reading the queue's keys again,
// even when the cached keys predate them.
func TestClaimForSeesTheKeysItsTransactionQueued(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if got := claimFor(t, db, []store.ClaimAsk{{AgentID: "a", Labels: linux, Slots: 1}}); len(got[0]) != 0 {
			t.Fatalf("claimed %d jobs from an empty queue", len(got[0]))
		}
		read := store.TrustKeys(db) // the cache knows no key, and is trusted
		var got [][]store.Claimed
		err := db.Update(ctx, func(tx *store.Tx) error {
			if _, err := tx.Runs().Create(ctx, newRun(job("j0"))); err != nil {
				return err
			}
			var err error
			got, err = tx.Queue().ClaimFor(ctx, []store.ClaimAsk{{AgentID: "a", Labels: linux, Slots: 1}})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(got[0]) != 1 || got[0][0].Name != "j0" {
			t.Fatalf("the inline claim got %v, want j0", got[0])
		}
		if !store.KeysReadAt(db).Equal(read) {
			t.Fatal("the claim read the queue's keys again to find the key its own transaction queued")
		}
	})
}
