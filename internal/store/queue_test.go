package store_test

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func reqJob(name string, runsOn []string, exclude ...string) store.NewJob {
	return store.NewJob{Name: name, Requirement: kiln.Requirement{RunsOn: kiln.NewLabels(runsOn...), Exclude: kiln.NewLabels(exclude...)}}
}

func claimedNames(cs []store.Claimed) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return out
}

// Claims match labels (all required, none excluded) and mandatory labels
// (the job must ask for every one), oldest first, up to the free slots.
// Proves B28 (docs/behaviours.md).
func TestClaimMatching(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		mustCreate(t, db, newRun(
			reqJob("any", nil),
			reqJob("linux", []string{"linux"}),
			reqJob("linux-no-gpu", []string{"linux"}, "gpu"),
			reqJob("gpu", []string{"linux", "gpu"}),
			reqJob("arm", []string{"linux", "arm64"}),
			reqJob("linux2", []string{"Linux "}), // canonicalized
		))
		keys, err := db.Queue().Keys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"", "gpu,linux", "arm64,linux", "linux", "linux!gpu"}
		sort.Strings(keys)
		sort.Strings(want)
		if !reflect.DeepEqual(keys, want) {
			t.Fatalf("keys %q, want %q", keys, want)
		}
		gpuAgent := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "gpu"), Mandatory: kiln.NewLabels("gpu")}
		cs, err := db.Queue().Claim(ctx, "gpu-1", gpuAgent, 10)
		if err != nil {
			t.Fatal(err)
		}
		if got := claimedNames(cs); !reflect.DeepEqual(got, []string{"gpu"}) {
			t.Fatalf("mandatory-gpu agent claimed %v", got)
		}
		plain := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "amd64")}
		cs, _ = db.Queue().Claim(ctx, "plain-1", plain, 2)
		if got := claimedNames(cs); !reflect.DeepEqual(got, []string{"any", "linux"}) {
			t.Fatalf("first two claims %v", got)
		}
		cs, _ = db.Queue().Claim(ctx, "plain-1", plain, 10)
		if got := claimedNames(cs); !reflect.DeepEqual(got, []string{"linux-no-gpu", "linux2"}) {
			t.Fatalf("the rest %v", got)
		}
		ok, _ := db.Queue().HasMatch(ctx, plain)
		arm := kiln.AgentLabels{Labels: kiln.NewLabels("linux", "arm64")}
		okArm, _ := db.Queue().HasMatch(ctx, arm)
		if ok || !okArm {
			t.Fatalf("has match: plain %v arm %v", ok, okArm)
		}
		if cs, _ := db.Queue().Claim(ctx, "x", plain, 0); cs != nil {
			t.Fatal("a claim with no slots claimed")
		}
		if _, err := db.Queue().Claim(ctx, "", plain, 1); err == nil {
			t.Fatal("a claim without an agent id was accepted")
		}
	})
}

// A claim sets the lease: dispatched, agent, epoch+1, attempt counted, ack
// deadline; it clears the pending reason and (B37) the
// last_provisioning_error, which is empty until a failure is recorded (B35).
func TestClaimSetsLease(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a")))
		id := cr.Jobs["a"]
		j := mustJob(t, db, id)
		if j.PendingReason != store.ReasonWaiting || !j.PendingSince.Equal(clock.Now()) || j.LastProvisioningError != "" {
			t.Fatalf("queued job %+v", j)
		}
		// B35: empty so far; record a failure for the claim to clear.
		if ok, err := db.Queue().SetProvisioningError(ctx, id, "agent process error: spawn node ENOENT"); !ok || err != nil {
			t.Fatalf("set provisioning error: %v %v", ok, err)
		}
		c := claimJob(t, db, "agent-1", id)
		if c.Epoch != 1 || c.Attempt != 1 || !c.AckDeadline.Equal(clock.Now().Add(store.DefaultAckTimeout)) ||
			c.Requirement.Key() != "linux" || string(c.Spec) != "{}" {
			t.Fatalf("claimed %+v", c)
		}
		j = wantStatus(t, db, id, kiln.JobDispatched)
		// B37: dispatching the job cleared it.
		if j.LastProvisioningError != "" || j.PendingReason != "" || j.AgentID != "agent-1" || j.LeaseEpoch != 1 || j.Attempts != 1 {
			t.Fatalf("dispatched job %+v", j)
		}
	})
}

// Proves B34 (docs/behaviours.md).
func TestPendingReasons(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b"), reqJob("gpu", []string{"gpu"}), job("later", need("a"))))
		a, b := cr.Jobs["a"], cr.Jobs["b"]
		t0 := clock.Now()
		clock.Advance(sec(1))
		n, err := db.Queue().SetPendingReason(ctx, store.ReasonNoAgent(linuxReq()), a, b, cr.Jobs["later"])
		if err != nil || n != 2 {
			t.Fatalf("set reason: %d %v (the pending job must be left alone)", n, err)
		}
		t1 := clock.Now()
		clock.Advance(sec(1))
		// The same reason again keeps its time.
		if n, _ := db.Queue().SetPendingReason(ctx, store.ReasonNoAgent(linuxReq()), a); n != 0 {
			t.Fatalf("an unchanged reason was rewritten")
		}
		if j := mustJob(t, db, a); j.PendingReason != "no connected agent with labels linux" || !j.PendingSince.Equal(t1) {
			t.Fatalf("a: %q since %v", j.PendingReason, j.PendingSince)
		}
		n, err = db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, 0, time.Time{})
		if err != nil || n != 1 {
			t.Fatalf("by key: %d %v", n, err)
		}
		if j := mustJob(t, db, cr.Jobs["later"]); j.PendingReason != "waiting for needs: a" || !j.PendingSince.Equal(t0) {
			t.Fatalf("later: %q", j.PendingReason)
		}
		w, err := db.Queue().Waiting(ctx, 10)
		if err != nil || len(w) != 3 {
			t.Fatalf("waiting %+v %v", w, err)
		}
		if w[2].Name != "gpu" || w[2].Reason != store.ReasonSpawning || !w[2].Since.Equal(clock.Now()) || w[2].RunNumber != 1 ||
			w[2].Workflow != "ci" || w[2].Requirement.Key() != "gpu" || !w[2].ExpiresAt.Equal(t0.Add(time.Hour)) {
			t.Fatalf("waiting gpu %+v", w[2])
		}
		if store.ReasonAgentsBusy(3) != "all 3 matching agents are busy" {
			t.Fatal(store.ReasonAgentsBusy(3))
		}
	})
}

// B36: a scaler.failed detail bound to a queued job is
// written into its last_provisioning_error (and shown as its pending
// reason); a job no longer queued is not written, and (B37) a claimed job
// has none.
func TestSetProvisioningError(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		const detail = "agent process error: spawn node ENOENT"
		ok, err := db.Queue().SetProvisioningError(ctx, cr.Jobs["a"], detail)
		if !ok || err != nil {
			t.Fatalf("%v %v", ok, err)
		}
		j := mustJob(t, db, cr.Jobs["a"])
		if j.LastProvisioningError != detail || j.PendingReason != "provisioning failed: "+detail {
			t.Fatalf("job %+v", j)
		}
		if mustJob(t, db, cr.Jobs["b"]).LastProvisioningError != "" {
			t.Fatal("another job was written")
		}
		c := claimJob(t, db, "agent-1", cr.Jobs["a"])
		if ok, _ := db.Queue().SetProvisioningError(ctx, c.JobID, "late failure"); ok {
			t.Fatal("a dispatched job took a provisioning error")
		}
		if j := mustJob(t, db, c.JobID); j.LastProvisioningError != "" {
			t.Fatalf("dispatched job has %q", j.LastProvisioningError)
		}
		if _, err := db.Queue().SetProvisioningError(ctx, cr.Jobs["b"], ""); err == nil {
			t.Fatal("an empty detail was accepted")
		}
	})
}

// Queue depth reports every unfinished status (explicit zeros) and counts
// queued jobs by key and by label.
func TestQueueDepth(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		d, err := db.Queue().Depth(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []kiln.JobStatus{kiln.JobPending, kiln.JobQueued, kiln.JobDispatched, kiln.JobRunning} {
			if n, ok := d.ByStatus[s]; !ok || n != 0 {
				t.Fatalf("empty queue: %s = %d, %v", s, n, ok)
			}
		}
		mustCreate(t, db, newRun(job("a"), job("b"), reqJob("g", []string{"gpu", "linux"}), job("c", need("a"))))
		claimOne(t, db, "agent-1")
		d, _ = db.Queue().Depth(ctx)
		if d.ByStatus[kiln.JobQueued] != 2 || d.ByStatus[kiln.JobDispatched] != 1 || d.ByStatus[kiln.JobPending] != 1 {
			t.Fatalf("by status %v", d.ByStatus)
		}
		if !reflect.DeepEqual(d.ByKey, map[string]int{"linux": 1, "gpu,linux": 1}) ||
			!reflect.DeepEqual(d.ByLabel, map[string]int{"linux": 2, "gpu": 1}) {
			t.Fatalf("by key %v by label %v", d.ByKey, d.ByLabel)
		}
	})
}

// A key's reason written with a limit touches at most that many queued
// jobs per call (the fleet writes a long queue in short transactions), and
// a call after the last chunk changes nothing.
func TestPendingReasonForKeyInChunks(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		mustCreate(t, db, newRun(job("a"), job("b"), job("c")))
		var got []int
		for range 3 {
			n, err := db.Queue().SetPendingReasonForKey(ctx, linuxReq().Key(), "all 3 matching agents are busy", 2, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		if got[0] != 2 || got[1] != 1 || got[2] != 0 {
			t.Fatalf("chunks wrote %v jobs, want [2 1 0]", got)
		}
	})
}

// A reason decided before a job's provisioning error was recorded does not
// replace the error as the job's reason (the dispatcher decided it without
// knowing of the failure), nor does one decided in the same millisecond;
// one decided after it does (a new spawn began).
func TestPendingReasonDecidedBeforeAProvisioningErrorKeepsTheError(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(reqJob("gpu", []string{"gpu"})))
		id := cr.Jobs["gpu"]
		decided := clock.Now()
		clock.Advance(sec(1))
		if ok, err := db.Queue().SetProvisioningError(ctx, id, "boom"); err != nil || !ok {
			t.Fatalf("provisioning error: %v %v", ok, err)
		}
		failed := mustJob(t, db, id).PendingReason
		if n, err := db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, 500, decided); err != nil || n != 0 {
			t.Fatalf("a reason decided before the error: %d %v", n, err)
		}
		// The same millisecond as the error: which came first is unknown,
		// and the error stays.
		if n, err := db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, 500, clock.Now()); err != nil || n != 0 {
			t.Fatalf("a reason decided in the error's millisecond: %d %v", n, err)
		}
		if j := mustJob(t, db, id); j.PendingReason != failed {
			t.Fatalf("reason %q, want %q", j.PendingReason, failed)
		}
		clock.Advance(sec(1))
		if n, err := db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, 500, clock.Now()); err != nil || n != 1 {
			t.Fatalf("a reason decided after the error: %d %v", n, err)
		}
	})
}
