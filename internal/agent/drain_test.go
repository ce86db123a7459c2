package agent

import (
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/proto"
)

// untilStatus reads frames until an agent.status that satisfies ok.
func untilStatus(t *testing.T, c *agenttest.Conn, ok func(*proto.AgentStatus) bool) {
	t.Helper()
	c.Until(t, func(f agenttest.Frame) bool {
		st, is := f.Msg.(*proto.AgentStatus)
		return is && ok(st)
	})
}

// Proves B55 (docs/behaviours.md).
func TestDrainFinishesTheRunningJobThenExits(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{HeartbeatIntervalMS: 5})
	c.SetAutoAck(true)
	c.Send(t, dispatch("job-1", 1, "block", "output done=yes"))
	x := h.exec(t)
	untilStatus(t, c, func(st *proto.AgentStatus) bool { return st.ActiveJobs == 1 })

	close(h.drain) // what SIGTERM does
	untilStatus(t, c, func(st *proto.AgentStatus) bool { return st.Draining && st.ActiveJobs == 1 })
	for {
		if hb, ok := c.Heartbeat(t).(*proto.Heartbeat); ok && hb.Draining {
			break
		}
	}
	c.Send(t, dispatch("job-2", 1, "block"))
	c.Until(t, func(f agenttest.Frame) bool {
		rej, ok := f.Msg.(*proto.JobReject)
		if ok && (rej.JobID != "job-2" || rej.Reason != proto.RejectDraining) {
			t.Fatalf("reject %+v", rej)
		}
		return ok
	})

	x.Release()
	final := durable(t, c, "job-1")
	if st := final[len(final)-1].Msg.(*proto.JobStatus); st.Status != kiln.JobSuccess || st.Outputs["done"] != "yes" {
		t.Fatalf("final %+v", st)
	}
	if code := c.WaitClosed(t); code != 1000 {
		t.Fatalf("closed with %d", code)
	}
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}

// Proves B55 (docs/behaviours.md).
func TestOrchestratorDrainsTheAgent(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	c.Send(t, &proto.Drain{})
	untilStatus(t, c, func(st *proto.AgentStatus) bool { return st.Draining && st.ActiveJobs == 0 })
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestDrainWaitsForTheFinalStatusToBeAcknowledged(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c1, _ := h.connect(t, proto.RegisterAck{})
	c1.Send(t, dispatch("job-1", 1, "output a=1"))
	durable(t, c1, "job-1") // not acknowledged
	// The next connection acknowledges on arrival: the agent replays right
	// after registering, before the test could switch acking on.
	orch.SetAutoAck(true)
	close(h.drain)
	c1.Drop()
	// The agent comes back to deliver the final status before it exits.
	c2, reg := h.connect(t, proto.RegisterAck{})
	if !reg.Draining || len(reg.InFlight) != 1 || reg.InFlight[0].JobID != "job-1" {
		t.Fatalf("register %+v", reg)
	}
	durable(t, c2, "job-1")
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}

// Proves B55 (docs/behaviours.md).
func TestSecondSignalHardStops(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	c.SetAutoAck(true)
	c.Send(t, dispatch("job-1", 1, "block"))
	x := h.exec(t)
	close(h.drain) // the first signal
	untilStatus(t, c, func(st *proto.AgentStatus) bool { return st.Draining })
	h.stop() // the second
	if !forceOf(t, x) {
		t.Fatal("the hard stop cancelled gracefully")
	}
	final := durable(t, c, "job-1")
	if st := final[len(final)-1].Msg.(*proto.JobStatus); st.Status != kiln.JobCancelled {
		t.Fatalf("final %+v", st)
	}
	if code := c.WaitClosed(t); code != 1000 {
		t.Fatalf("closed with %d", code)
	}
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}

func TestHardStopWithoutConnectionExitsOnceJobsEnd(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	c.Send(t, dispatch("job-1", 1, "block"))
	x := h.exec(t)
	orch.SetOffline(true)
	c.Drop()
	h.stop()
	if !forceOf(t, x) {
		t.Fatal("not force-cancelled")
	}
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
}
