package fleet

import (
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

func withStore(f func(*store.Config)) func(*store.Config) { return f }

// A dispatch not acknowledged in time is requeued (its attempt counted)
// and its agent disconnected with 4031; the job goes to another agent
// under a new epoch, and the old agent's late reports change nothing.
// Proves B30 (docs/behaviours.md).
func TestAckTimeout(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig(), fakeClock: true,
			store: withStore(func(c *store.Config) { c.AckTimeout = time.Second })})
		_, secret := h.token(store.AgentTokenSpec{})
		slow, _ := h.connect(secret, reg{id: "slow"})
		_, jobs := h.run(job("j", "linux"))
		d := expect[*proto.Dispatch](slow)
		h.advance(time.Second)
		if code, reason := slow.closed(); code != proto.CloseDispatchAckLate || !strings.Contains(reason, d.JobID) {
			t.Fatalf("close %d %q", code, reason)
		}
		j := h.job(jobs["j"])
		if j.Status != kiln.JobQueued || j.Attempts != 1 || !strings.Contains(j.Error, "did not acknowledge") {
			t.Fatalf("after the ack timeout: %s attempts %d error %q", j.Status, j.Attempts, j.Error)
		}
		if h.f.reg.get("slow") != nil {
			t.Fatal("the agent is still registered")
		}

		fast, _ := h.connect(secret, reg{id: "fast"})
		d2 := expect[*proto.Dispatch](fast)
		if d2.JobID != d.JobID || d2.LeaseEpoch != 2 || d2.Attempt != 2 {
			t.Fatalf("second dispatch %+v", d2)
		}
		fast.send(&proto.JobAck{JobID: d2.JobID, LeaseEpoch: 2})
		fast.send(&proto.JobStatus{JobID: d2.JobID, LeaseEpoch: 2, Status: kiln.JobRunning, Time: time.Now()})
		fast.waitAck(fast.seq)

		// The slow agent comes back claiming the job: it is dropped, and
		// its late completion is refused.
		back, ack := h.connect(secret, reg{id: "slow", inFlight: []proto.InFlight{{JobID: d.JobID, RunID: d.RunID, LeaseEpoch: 1}}})
		if len(ack.Dropped) != 1 || ack.Dropped[0] != d.JobID || len(ack.Recovered) != 0 {
			t.Fatalf("register.ack %+v", ack)
		}
		back.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobSuccess, Time: time.Now()})
		if e := back.errorFrame(); e.Code != proto.ErrStaleLease {
			t.Fatalf("error %+v", e)
		}
		back.waitAck(back.seq) // refused frames are acknowledged: the agent is done with them
		back.send(&proto.Log{JobID: d.JobID, LeaseEpoch: 1, Step: 0, Lines: []proto.LogLine{{Seq: 1, Stream: "stdout", Text: "late"}}})
		if e := back.errorFrame(); e.Code != proto.ErrStaleLease {
			t.Fatalf("error %+v", e)
		}
		j = h.job(d.JobID)
		if j.Status != kiln.JobRunning || j.AgentID != "fast" || j.LeaseEpoch != 2 {
			t.Fatalf("a late update changed the job: %s on %s epoch %d", j.Status, j.AgentID, j.LeaseEpoch)
		}
		if st := h.f.Stats(); st.StaleRefused < 2 || st.Disconnects["ack_timeout"] != 1 {
			t.Fatalf("stats %+v", st)
		}
	})
}

// A rejected job goes back to the queue with its attempt counted and on to
// another agent; a busy agent gets no more work until it says it has room.
// Proves B30 (docs/behaviours.md).
func TestReject(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		busy, _ := h.connect(secret, reg{id: "a-busy", maxJobs: 2})
		_, jobs := h.run(job("j", "linux"))
		d := expect[*proto.Dispatch](busy)
		busy.send(&proto.JobReject{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Reason: proto.RejectBusy, Message: "no room"})
		waittest.Until(t, waittest.Timeout, "the job is requeued", func() bool {
			j := h.job(jobs["j"])
			return j.Status == kiln.JobQueued && j.Attempts == 1 && strings.Contains(j.Error, "no room")
		})
		busy.quiet(100 * time.Millisecond) // full until it says otherwise
		other, _ := h.connect(secret, reg{id: "b-other"})
		d2 := expect[*proto.Dispatch](other)
		if d2.JobID != d.JobID || d2.Attempt != 2 {
			t.Fatalf("redispatch %+v", d2)
		}
		other.runJob(d2, kiln.JobSuccess)
		other.ws.CloseNow()
		waittest.Until(t, waittest.Timeout, "the other agent is gone", func() bool { return h.f.reg.get("b-other") == nil })
		h.run(job("k", "linux"))
		busy.quiet(50 * time.Millisecond)
		busy.send(&proto.AgentStatus{ActiveJobs: 0})
		expect[*proto.Dispatch](busy)
	})
}

// B47: the heartbeat monitor marks a silent agent
// unhealthy (no new jobs), and drops one silent past DropAfter: its jobs
// are handed to recovery first, then it is unregistered, then its socket
// closes with 4004 — so when the agent sees the close, all of it is done.
func TestHeartbeatMonitorOrdering(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		cfg := fastConfig()
		cfg.HeartbeatInterval, cfg.UnhealthyAfter, cfg.DropAfter = time.Second, 3*time.Second, 6*time.Second
		h := start(t, b, options{cfg: cfg, fakeClock: true})
		_, secret := h.token(store.AgentTokenSpec{})
		c, _ := h.connect(secret, reg{id: "quiet", maxJobs: 2})
		_, jobs := h.run(job("started", "linux"), job("unstarted", "linux"))
		d1, d2 := expect[*proto.Dispatch](c), expect[*proto.Dispatch](c)
		started := d1
		if d1.JobID != jobs["started"] {
			started = d2
		}
		c.send(&proto.JobAck{JobID: d1.JobID, LeaseEpoch: 1})
		c.send(&proto.JobAck{JobID: d2.JobID, LeaseEpoch: 1})
		c.send(&proto.JobStatus{JobID: started.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
		c.waitAck(c.seq)

		h.advance(4 * time.Second)
		waittest.Until(t, waittest.Timeout, "the agent is unhealthy", func() bool {
			as := h.f.Agents()
			return len(as) == 1 && !as[0].Healthy
		})
		h.advance(3 * time.Second)
		code, reason := c.closed()
		// At the moment of the close: the jobs are in recovery (the
		// unstarted one already requeued) and the agent is unregistered.
		if h.f.reg.get("quiet") != nil {
			t.Fatal("the agent was still registered when its socket closed")
		}
		if j := h.job(jobs["started"]); j.Status != kiln.JobRecovering {
			t.Fatalf("the started job was %s when the socket closed", j.Status)
		}
		if j := h.job(jobs["unstarted"]); j.Status != kiln.JobQueued {
			t.Fatalf("the unstarted job was %s when the socket closed", j.Status)
		}
		if code != proto.CloseHeartbeat || !strings.Contains(reason, "heartbeat timeout") {
			t.Fatalf("close %d %q", code, reason)
		}
	})
}

// A dropped connection's unstarted job runs elsewhere at once; its started
// job waits for the agent's return within the recovery window and stays
// with it when it lists the job in in_flight.
// Proves B52 (docs/behaviours.md).
func TestRecoveryKeepsListedJob(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		c, _ := h.connect(secret, reg{id: "a", maxJobs: 2})
		_, jobs := h.run(job("started", "linux"), job("unstarted", "linux"))
		d1, d2 := expect[*proto.Dispatch](c), expect[*proto.Dispatch](c)
		started, unstarted := d1, d2
		if d1.JobID != jobs["started"] {
			started, unstarted = d2, d1
		}
		c.send(&proto.JobAck{JobID: started.JobID, LeaseEpoch: 1})
		c.send(&proto.JobStatus{JobID: started.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
		c.waitAck(c.seq)
		idle, _ := h.connect(secret, reg{id: "b-idle"})
		c.ws.CloseNow() // kill -9: the socket drops
		d := expect[*proto.Dispatch](idle)
		if d.JobID != unstarted.JobID || d.LeaseEpoch != 2 {
			t.Fatalf("the idle agent got %+v", d)
		}
		h.waitStatus(started.JobID, kiln.JobRecovering)

		back, ack := h.connect(secret, reg{id: "a", maxJobs: 2, inFlight: []proto.InFlight{
			{JobID: started.JobID, RunID: started.RunID, LeaseEpoch: 1, Started: true},
			{JobID: unstarted.JobID, RunID: unstarted.RunID, LeaseEpoch: 1},
		}})
		if len(ack.Recovered) != 1 || ack.Recovered[0] != started.JobID || len(ack.Dropped) != 1 || ack.Dropped[0] != unstarted.JobID {
			t.Fatalf("register.ack %+v", ack)
		}
		h.waitStatus(started.JobID, kiln.JobRunning)
		back.send(&proto.Log{JobID: started.JobID, LeaseEpoch: 1, Step: 0, Lines: []proto.LogLine{{Seq: 1, Stream: "stdout", Text: "still here"}}})
		back.send(&proto.JobStatus{JobID: started.JobID, LeaseEpoch: 1, Status: kiln.JobSuccess, Time: time.Now()})
		back.waitAck(back.seq)
		h.waitStatus(started.JobID, kiln.JobSuccess)
	})
}

// When the recovery window ends, a started job follows its on_agent_lost:
// retry requeues it once (a second loss ends it agent_lost), fail ends it
// agent_lost at once.
// Proves B53 (docs/behaviours.md).
func TestRecoveryWindowExpiry(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig(), fakeClock: true,
			store: withStore(func(c *store.Config) { c.RecoveryWindow = 10 * time.Second })})
		_, secret := h.token(store.AgentTokenSpec{})
		_, jobs := h.run(testJob{name: "retry", runsOn: []string{"linux"}, onAgentLost: store.AgentLostRetry},
			testJob{name: "fail", runsOn: []string{"linux"}, onAgentLost: store.AgentLostFail})
		lose := func(id string, want int) {
			t.Helper()
			c, _ := h.connect(secret, reg{id: id, maxJobs: 2})
			for i := 0; i < want; i++ {
				d := expect[*proto.Dispatch](c)
				c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
				c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
			}
			c.waitAck(c.seq)
			c.ws.CloseNow()
			waittest.Until(t, waittest.Timeout, "the agent is gone", func() bool { return h.f.reg.get(id) == nil })
		}
		lose("a", 2)
		h.waitStatus(jobs["retry"], kiln.JobRecovering)
		h.advance(9 * time.Second)
		h.sweeps(2)
		h.waitStatus(jobs["fail"], kiln.JobRecovering)
		h.advance(time.Second)
		h.waitStatus(jobs["fail"], kiln.JobAgentLost)
		h.waitStatus(jobs["retry"], kiln.JobQueued)

		lose("b", 1) // the retry runs again and its agent is lost again
		h.advance(10 * time.Second)
		if j := h.waitStatus(jobs["retry"], kiln.JobAgentLost); !strings.Contains(j.Error, "retry") {
			t.Fatalf("error %q", j.Error)
		}
	})
}

// A running job whose job heartbeats stop is ended timed_out_stale and its
// agent told to stop it; job heartbeats (written in batches) keep it alive.
// Proves B49 (docs/behaviours.md).
func TestStaleDetector(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h := start(t, b, options{cfg: fastConfig(), fakeClock: true,
			store: withStore(func(c *store.Config) { c.StaleAfter = 5 * time.Second })})
		_, secret := h.token(store.AgentTokenSpec{})
		c, _ := h.connect(secret, reg{id: "a", maxJobs: 2})
		_, jobs := h.run(job("alive", "linux"), job("stuck", "linux"))
		ds := map[string]*proto.Dispatch{}
		for i := 0; i < 2; i++ {
			d := expect[*proto.Dispatch](c)
			ds[d.JobID] = d
			c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: 1})
			c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: 1, Status: kiln.JobRunning, Time: time.Now()})
		}
		c.waitAck(c.seq)
		alive := ds[jobs["alive"]]
		for i := 0; i < 3; i++ {
			h.advance(3 * time.Second)
			c.send(&proto.JobHeartbeat{JobID: alive.JobID, LeaseEpoch: 1})
			c.send(&proto.Heartbeat{Time: time.Now(), ActiveJobs: 2})
			// A connection's frames are handled in order, so once this
			// durable frame is acknowledged the job heartbeat before it has
			// been taken in; the sweeps then write it.
			c.send(&proto.Log{JobID: alive.JobID, LeaseEpoch: 1, Step: 0,
				Lines: []proto.LogLine{{Seq: uint64(i + 1), Stream: proto.StreamStdout, Text: "alive"}}})
			c.waitAck(c.seq)
			h.sweeps(2)
		}
		cancel := expect[*proto.Cancel](c)
		if cancel.JobID != jobs["stuck"] || !cancel.Force {
			t.Fatalf("cancel %+v", cancel)
		}
		h.waitStatus(jobs["stuck"], kiln.JobTimedOutStale)
		if j := h.job(jobs["alive"]); j.Status != kiln.JobRunning {
			t.Fatalf("the heartbeating job is %s", j.Status)
		}
	})
}
