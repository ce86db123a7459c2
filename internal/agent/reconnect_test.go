package agent

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/waittest"
)

// describe renders a durable frame for comparisons.
func describe(f agenttest.Frame) string {
	switch m := f.Msg.(type) {
	case *proto.JobStatus:
		return fmt.Sprintf("%d job %s", f.Seq, m.Status)
	case *proto.StepStatus:
		return fmt.Sprintf("%d step%d %s", f.Seq, m.Index, m.Status)
	case *proto.Log:
		return fmt.Sprintf("%d log%d %d-%d", f.Seq, m.Step, m.Lines[0].Seq, m.Lines[len(m.Lines)-1].Seq)
	}
	return fmt.Sprintf("%d %s", f.Seq, f.Type())
}

func describeAll(fs []agenttest.Frame) []string {
	var out []string
	for _, f := range fs {
		if f.Seq > 0 {
			out = append(out, describe(f))
		}
	}
	return out
}

// Proves B51 (docs/behaviours.md).
func TestUnacknowledgedFramesAreReplayedInOrderAfterAReconnect(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c1, _ := h.connect(t, proto.RegisterAck{})
	c1.Send(t, dispatch("job-1", 5, "lines 100", "block"))
	expectAck(t, c1)
	x := h.exec(t)
	first := c1.Until(t, func(f agenttest.Frame) bool {
		st, ok := f.Msg.(*proto.StepStatus)
		return ok && st.Index == 1 && st.Status == kiln.StepRunning
	})
	sent := describeAll(first)
	if len(sent) < 5 {
		t.Fatalf("frames %v", sent)
	}
	// The orchestrator stores the first two frames, then the connection dies.
	c1.Send(t, &proto.Ack{Seq: 2})
	c1.Send(t, dispatch("job-1", 5, "lines 100", "block")) // a round trip: the ack was read
	expectAck(t, c1)
	c1.Drop()

	c2 := orch.Accept(t)
	_, reg := c2.Handshake(t, proto.RegisterAck{Recovered: []string{"job-1"}})
	if len(reg.InFlight) != 1 || reg.InFlight[0] != (proto.InFlight{JobID: "job-1", RunID: "run-1", LeaseEpoch: 5, Started: true}) {
		t.Fatalf("in_flight %+v", reg.InFlight)
	}
	replay := c2.Until(t, func(f agenttest.Frame) bool { return f.Seq == first[len(first)-1].Seq })
	if got := describeAll(replay); !slices.Equal(got, sent[2:]) {
		t.Fatalf("replayed %v\nwant     %v", got, sent[2:])
	}
	c2.Send(t, &proto.Ack{Seq: replay[len(replay)-1].Seq})
	c2.Send(t, dispatch("job-1", 5, "lines 100", "block"))
	expectAck(t, c2)
	c2.Drop()

	// Everything was acknowledged: nothing is replayed, the job goes on.
	c3, _ := h.connect(t, proto.RegisterAck{Recovered: []string{"job-1"}})
	x.Release()
	rest := describeAll(durable(t, c3, "job-1"))
	last := first[len(first)-1].Seq
	want := []string{fmt.Sprintf("%d step1 success", last+1), fmt.Sprintf("%d job success", last+2)}
	if !slices.Equal(rest, want) {
		t.Fatalf("after the second reconnect %v, want %v", rest, want)
	}
	if c1.OutOfOrder() || c2.OutOfOrder() || c3.OutOfOrder() {
		t.Fatal("durable frames out of order on a connection")
	}
}

// Proves B51 (docs/behaviours.md).
func TestBufferOverflowDropsOldestLogsBehindOneGapMarker(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, func(c *Config) { c.BufferFrames = 8; c.MaxFrameLines = 10 })
	c1, _ := h.connect(t, proto.RegisterAck{})
	c1.SetAutoAck(true)
	c1.Send(t, dispatch("job-1", 1, "block", "lines 300"))
	x := h.exec(t)
	c1.Until(t, func(f agenttest.Frame) bool { return f.Type() == proto.TypeStepStatus })
	c1.Send(t, dispatch("job-1", 1, "block", "lines 300")) // a round trip: the acks were read
	c1.Until(t, func(f agenttest.Frame) bool { return f.Type() == proto.TypeJobAck })
	// The orchestrator goes away; the job writes 300 lines into an outbox
	// of 8 frames of at most 10 lines, and ends.
	orch.SetOffline(true)
	dials := orch.Dials()
	c1.Drop()
	waittest.Until(t, agenttest.Timeout, "the agent to notice the lost connection", func() bool { return orch.Dials() > dials })
	x.Release()
	select {
	case <-x.Done():
	case <-time.After(agenttest.Timeout):
		t.Fatal("the job did not end")
	}
	orch.SetOffline(false)
	c2, _ := h.connect(t, proto.RegisterAck{})
	frames := durable(t, c2, "job-1")

	var statuses []string
	seen := map[uint64]bool{}
	var markers []proto.LogLine
	kept := 0
	for _, f := range frames {
		switch m := f.Msg.(type) {
		case *proto.StepStatus:
			statuses = append(statuses, fmt.Sprintf("step%d %s", m.Index, m.Status))
		case *proto.JobStatus:
			statuses = append(statuses, "job "+string(m.Status))
		case *proto.Log:
			for _, l := range m.Lines {
				if seen[l.Seq] {
					t.Fatalf("line seq %d twice", l.Seq)
				}
				seen[l.Seq] = true
				if l.Stream == proto.StreamSystem {
					markers = append(markers, l)
				} else {
					kept++
				}
			}
		}
	}
	// Statuses are never dropped.
	if want := []string{"step0 success", "step1 running", "step1 success", "job success"}; !slices.Equal(statuses, want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
	if len(markers) != 1 {
		t.Fatalf("%d gap markers: %+v", len(markers), markers)
	}
	dropped := 300 - kept
	want := fmt.Sprintf("; %d log lines were dropped ---", dropped)
	if markers[0].Seq != 1 || !strings.HasPrefix(markers[0].Text, "--- kiln agent: the connection to the orchestrator was lost for ") ||
		!strings.HasSuffix(markers[0].Text, want) {
		t.Fatalf("marker %+v, want seq 1 and %q", markers[0], want)
	}
	// The lines kept are the newest ones, and they follow the marker.
	for seq := uint64(dropped + 1); seq <= 300; seq++ {
		if !seen[seq] {
			t.Fatalf("line %d is missing; %d kept", seq, kept)
		}
	}
	if dropped < 250 {
		t.Fatalf("only %d lines dropped from an outbox of 8 frames", dropped)
	}
}

func TestBackoffGrowsAndResets(t *testing.T) {
	b := newBackoff(time.Second, 60*time.Second)
	b.rand = func(n int64) int64 { return n - 1 } // the longest delay
	var got []time.Duration
	for range 8 {
		got = append(got, b.next())
	}
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for i := range want {
		if got[i] != want[i]*time.Second {
			t.Fatalf("delays %v", got)
		}
	}
	b.rand = func(int64) int64 { return 0 } // the shortest: half
	b.reset()
	if d := b.next(); d != 500*time.Millisecond {
		t.Fatalf("after reset %v", d)
	}
}

// Proves B50 (docs/behaviours.md).
func TestReconnectDelaysGrowAndResetAfterRegistering(t *testing.T) {
	orch := agenttest.New(t)
	orch.SetOffline(true)
	h := startAgent(t, orch, nil) // 1 ms doubling to 8 ms
	within := func(d, ceil time.Duration) bool { return d >= ceil/2 && d <= ceil }
	for _, ceil := range []time.Duration{1, 2, 4, 8, 8} {
		if d := h.delay(t); !within(d, ceil*time.Millisecond) {
			t.Fatalf("delay %v, want within [%v, %v]", d, ceil*time.Millisecond/2, ceil*time.Millisecond)
		}
	}
	orch.SetOffline(false)
	c, _ := h.connect(t, proto.RegisterAck{})
	for len(h.waits) > 0 { // the failed attempts before the registration
		<-h.waits
	}
	c.Drop()
	if d := h.delay(t); !within(d, time.Millisecond) {
		t.Fatalf("the first delay after a registration is %v", d)
	}
	h.connect(t, proto.RegisterAck{})
}

// The agent side of B44: AGENT_ID_IN_USE comes with a
// retryable close (4003), and the agent retries.
func TestRetryableClosesReconnect(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c := orch.Accept(t)
	c.Expect(t, proto.TypeAuth)
	c.Send(t, &proto.AuthOK{ConnectionID: "c"})
	c.Expect(t, proto.TypeRegister)
	c.Close(&proto.Error{Code: proto.ErrAgentIDInUse, Message: "agent id in use"}, proto.CloseInvalidMessage, "agent id in use")
	c = orch.Accept(t)
	c.Handshake(t, proto.RegisterAck{})
	c.Close(nil, proto.CloseGoingAway, "restart")
	h.connect(t, proto.RegisterAck{})
}

// An orchestrator going away (close 1001: its server stops or restarts) is
// no fault to warn about: the agent notes it and reconnects; any other lost
// connection is a warning.
func TestAGoingAwayOrchestratorIsNoWarning(t *testing.T) {
	var logs syncBuffer
	orch := agenttest.New(t)
	h := startAgent(t, orch, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	c, _ := h.connect(t, proto.RegisterAck{})
	c.Close(nil, proto.CloseGoingAway, "the orchestrator is shutting down")
	h.delay(t)
	c, _ = h.connect(t, proto.RegisterAck{}) // after the log line of the retry
	if got := logs.String(); strings.Contains(got, "level=WARN") || !strings.Contains(got, "level=INFO msg=\"the orchestrator went away") {
		t.Fatalf("after a 1001 close the agent logged:\n%s", got)
	}
	c.Drop()
	h.delay(t)
	h.connect(t, proto.RegisterAck{}) // after the log line of the retry
	if got := logs.String(); !strings.Contains(got, "level=WARN msg=\"no connection to the orchestrator\"") {
		t.Fatalf("a dropped connection was not warned about:\n%s", got)
	}
}

// An agent stopped with no job running says so without a warning: there
// is nothing to force-cancel.
func TestAStopWithNoJobIsNoWarning(t *testing.T) {
	var logs syncBuffer
	orch := agenttest.New(t)
	h := startAgent(t, orch, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	h.connect(t, proto.RegisterAck{})
	h.stop()
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
	if got := logs.String(); strings.Contains(got, "level=WARN") || !strings.Contains(got, "msg=stopping") {
		t.Fatalf("a stop with no job logged:\n%s", got)
	}
}

// Proves B50 (docs/behaviours.md).
func TestPermanentClosesStopTheAgent(t *testing.T) {
	cases := []struct {
		code       int
		registered bool
		want       string
	}{
		{proto.CloseAuthFailed, false, "the orchestrator refused the agent token"},
		{proto.CloseProtocol, false, "does not speak protocol version 1"},
		{proto.CloseTokenRevoked, true, "the agent token was revoked"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprint(tc.code), func(t *testing.T) {
			orch := agenttest.New(t)
			h := startAgent(t, orch, nil)
			c := orch.Accept(t)
			if tc.registered {
				c.Handshake(t, proto.RegisterAck{})
			} else {
				c.Expect(t, proto.TypeAuth)
			}
			c.Close(&proto.Error{Code: proto.ErrUnauthorized, Message: "token tok_1 is revoked"}, tc.code, "bye")
			err := h.wait(t)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "token tok_1 is revoked") ||
				!strings.Contains(err.Error(), fmt.Sprint(tc.code)) {
				t.Fatalf("err = %v", err)
			}
			if n := orch.Dials(); n != 1 {
				t.Fatalf("%d connection attempts", n)
			}
		})
	}
}

func TestSupersededAgentExitsCleanly(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	c.Send(t, dispatch("job-1", 1, "block"))
	expectAck(t, c)
	x := h.exec(t)
	c.Close(nil, proto.CloseSuperseded, "superseded")
	if err := h.wait(t); err != nil {
		t.Fatal(err)
	}
	if !forceOf(t, x) {
		t.Fatal("the job was not force-cancelled")
	}
}

func TestDroppedJobIsStoppedAndItsFramesDiscarded(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c1, _ := h.connect(t, proto.RegisterAck{})
	c1.Send(t, dispatch("job-1", 1, "lines 30", "block"))
	expectAck(t, c1)
	x := h.exec(t)
	c1.Until(t, func(f agenttest.Frame) bool {
		st, ok := f.Msg.(*proto.StepStatus)
		return ok && st.Index == 1
	})
	c1.Drop()

	c2 := orch.Accept(t)
	_, reg := c2.Handshake(t, proto.RegisterAck{Dropped: []string{"job-1"}})
	if len(reg.InFlight) != 1 || reg.InFlight[0].JobID != "job-1" {
		t.Fatalf("in_flight %+v", reg.InFlight)
	}
	if !forceOf(t, x) {
		t.Fatal("the dropped job was cancelled gracefully")
	}
	<-x.Done()
	// Anything of job-1 would come before job-2's frames.
	c2.SetAutoAck(true)
	c2.Send(t, dispatch("job-2", 1, "lines 3"))
	for _, f := range durable(t, c2, "job-2") {
		if jobOf(f) != "job-2" {
			t.Fatalf("frame of the dropped job: %s %+v", f.Type(), f.Msg)
		}
	}
}

func jobOf(f agenttest.Frame) string {
	switch m := f.Msg.(type) {
	case *proto.JobStatus:
		return m.JobID
	case *proto.StepStatus:
		return m.JobID
	case *proto.Log:
		return m.JobID
	case *proto.JobAck:
		return m.JobID
	}
	return ""
}
