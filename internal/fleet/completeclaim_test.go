package fleet

import (
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// A busy agent whose job ends gets its next queued job from the
// transaction that stores the end (complete-and-claim): no second commit
// and no dispatcher pass between the two. An agent draining when its job
// ends gets nothing from it, and a refused (stale) end claims nothing.
// Proves B251 (docs/behaviours.md).
func TestCompletionClaimsTheAgentsNextJob(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		c, _ := h.connect(secret, reg{id: "a"})
		_, jobs := h.run(job("one", "linux"), job("two", "linux"), job("three", "linux"))

		d1 := expect[*proto.Dispatch](c)
		if d1.JobID != jobs["one"] {
			t.Fatalf("first dispatch %+v, want job one", d1)
		}
		c.runJob(d1, kiln.JobSuccess)
		d2 := expect[*proto.Dispatch](c)
		if d2.JobID != jobs["two"] {
			t.Fatalf("second dispatch %+v, want job two", d2)
		}
		if got := h.f.Stats().ClaimedOnCompletion; got != 1 {
			t.Fatalf("%d jobs claimed with a completion, want 1", got)
		}
		if j := h.job(jobs["one"]); j.Status != kiln.JobSuccess {
			t.Fatalf("job one is %s after its next job was sent", j.Status)
		}

		// A stale end is refused and claims nothing.
		c.send(&proto.JobStatus{JobID: d1.JobID, LeaseEpoch: d1.LeaseEpoch + 5, Status: kiln.JobSuccess, Time: time.Now()})
		if e := c.errorFrame(); e.Code != proto.ErrStaleLease {
			t.Fatalf("error %+v, want a stale lease", e)
		}

		// Draining: job two's end leaves job three queued.
		c.send(&proto.JobAck{JobID: d2.JobID, LeaseEpoch: d2.LeaseEpoch})
		c.send(&proto.JobStatus{JobID: d2.JobID, LeaseEpoch: d2.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
		c.send(&proto.AgentStatus{Draining: true, ActiveJobs: 1})
		waittest.Until(t, waittest.Timeout, "the agent drains", func() bool {
			a := h.f.reg.get("a")
			a.mu.Lock()
			defer a.mu.Unlock()
			return a.draining
		})
		c.send(&proto.JobStatus{JobID: d2.JobID, LeaseEpoch: d2.LeaseEpoch, Status: kiln.JobSuccess, Time: time.Now()})
		c.waitAck(c.seq)
		c.quiet(200 * time.Millisecond)
		if j := h.job(jobs["three"]); j.Status != kiln.JobQueued {
			t.Fatalf("job three is %s while its only agent drains, want queued", j.Status)
		}
		if got := h.f.Stats().ClaimedOnCompletion; got != 1 {
			t.Fatalf("%d jobs claimed with a completion, want still 1", got)
		}
	})
}
