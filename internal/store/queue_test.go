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
		if err := db.Queue().SetPendingReasonForKey(ctx, linuxReq().Key(), store.ReasonNoAgent(linuxReq()), time.Time{}); err != nil {
			t.Fatalf("set reason: %v", err)
		}
		t1 := clock.Now()
		clock.Advance(sec(1))
		// The same reason again keeps its time.
		if err := db.Queue().SetPendingReasonForKey(ctx, linuxReq().Key(), store.ReasonNoAgent(linuxReq()), time.Time{}); err != nil {
			t.Fatalf("set reason again: %v", err)
		}
		for _, id := range []string{a, b} {
			if j := mustJob(t, db, id); j.PendingReason != "no connected agent with labels linux" || !j.PendingSince.Equal(t1) {
				t.Fatalf("%s: %q since %v", id, j.PendingReason, j.PendingSince)
			}
		}
		if err := db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, time.Time{}); err != nil {
			t.Fatalf("by key: %v", err)
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

// A key's reason is one row, shown by every queued job of the key that did
// not change after it was decided, since the later of when it was set and
// when the job was queued; a job queued after the decision keeps the
// reason it was queued with until the next one. The same reason decided
// again keeps its time; an older decision does not replace a newer one;
// a job no longer queued does not show it.
// Proves B34 (docs/behaviours.md).
func TestPendingReasonForKeyIsOneRowForTheQueue(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		key, busy := linuxReq().Key(), "all 3 matching agents are busy"
		clock.Advance(sec(1))
		t1 := clock.Now()
		if err := db.Queue().SetPendingReasonForKey(ctx, key, busy, t1); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"a", "b"} {
			if j := mustJob(t, db, cr.Jobs[name]); j.PendingReason != busy || !j.PendingSince.Equal(t1) {
				t.Fatalf("%s: %q since %v, want %q since %v", name, j.PendingReason, j.PendingSince, busy, t1)
			}
		}
		clock.Advance(sec(1))
		later := mustCreate(t, db, newRun(job("c"))).Jobs["c"]
		if j := mustJob(t, db, later); j.PendingReason != store.ReasonWaiting {
			t.Fatalf("a job queued after the decision: %q, want its own %q", j.PendingReason, store.ReasonWaiting)
		}
		clock.Advance(sec(1))
		if err := db.Queue().SetPendingReasonForKey(ctx, key, busy, clock.Now()); err != nil {
			t.Fatal(err)
		}
		j := mustJob(t, db, later)
		if j.PendingReason != busy || !j.PendingSince.Equal(j.QueuedAt) {
			t.Fatalf("decided again: %q since %v, want %q since it was queued (%v)", j.PendingReason, j.PendingSince, busy, j.QueuedAt)
		}
		if j := mustJob(t, db, cr.Jobs["a"]); !j.PendingSince.Equal(t1) {
			t.Fatalf("the same reason again moved its time to %v", j.PendingSince)
		}
		// Another coordinator's older decision, written late, changes nothing.
		if err := db.Queue().SetPendingReasonForKey(ctx, key, store.ReasonNoAgent(linuxReq()), t1); err != nil {
			t.Fatal(err)
		}
		w, err := db.Queue().Waiting(ctx, 10)
		if err != nil || len(w) != 3 {
			t.Fatalf("waiting %+v %v", w, err)
		}
		for _, x := range w {
			if x.Reason != busy {
				t.Fatalf("waiting %s: %q, want %q", x.Name, x.Reason, busy)
			}
		}
		claimJob(t, db, "agent-1", cr.Jobs["a"])
		if j := mustJob(t, db, cr.Jobs["a"]); j.PendingReason != "" {
			t.Fatalf("a claimed job shows %q", j.PendingReason)
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
		if err := db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, decided); err != nil {
			t.Fatal(err)
		}
		if j := mustJob(t, db, id); j.PendingReason != failed {
			t.Fatalf("a reason decided before the error: %q, want %q", j.PendingReason, failed)
		}
		// The same millisecond as the error: which came first is unknown,
		// and the error stays.
		if err := db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, clock.Now()); err != nil {
			t.Fatal(err)
		}
		if j := mustJob(t, db, id); j.PendingReason != failed {
			t.Fatalf("a reason decided in the error's millisecond: %q, want %q", j.PendingReason, failed)
		}
		clock.Advance(sec(1))
		if err := db.Queue().SetPendingReasonForKey(ctx, "gpu", store.ReasonSpawning, clock.Now()); err != nil {
			t.Fatal(err)
		}
		if j := mustJob(t, db, id); j.PendingReason != store.ReasonSpawning {
			t.Fatalf("a reason decided after the error: %q", j.PendingReason)
		}
	})
}
