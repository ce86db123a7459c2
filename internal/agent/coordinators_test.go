package agent

import (
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/agent/agenttest"
	"github.com/kilnci/kiln/internal/proto"
)

// roundTrip makes sure the agent has read every frame sent before it: a
// dispatch without steps is refused at once, after the frames before it.
func roundTrip(t *testing.T, c *agenttest.Conn, jobID string) {
	t.Helper()
	c.Send(t, dispatch(jobID, 1))
	if rej := c.Expect(t, proto.TypeJobReject).Msg.(*proto.JobReject); rej.JobID != jobID {
		t.Fatalf("reject %+v", rej)
	}
}

// B139: a coordinators frame replaces the list register.ack gave. The
// agent registered with server A when A was alone; A then tells it of B.
// When A goes away, the agent's next attempt after the failed one goes to
// B, which it had never been told of at registration. B's register.ack
// names B and C; then C dies and B says so: when B goes away too, the
// agent tries A (the URL it was configured with) and never C.
//
// Proves B139 (docs/behaviours.md).
func TestCoordinatorsFrameReplacesTheFailoverList(t *testing.T) {
	orchA, orchB, orchC := agenttest.New(t), agenttest.New(t), agenttest.New(t)
	h := startAgent(t, orchA, nil)
	c1, _ := h.connect(t, proto.RegisterAck{Coordinators: []string{orchA.URL()}})
	c1.Send(t, &proto.Coordinators{Coordinators: []string{orchA.URL(), orchB.URL()}})
	roundTrip(t, c1, "job-1")

	orchA.SetOffline(true)
	c1.Drop()
	c2 := orchB.Accept(t)
	c2.Handshake(t, proto.RegisterAck{Coordinators: []string{orchB.URL(), orchC.URL()}})
	roundTrip(t, c2, "job-2")
	c2.Send(t, &proto.Coordinators{Coordinators: []string{orchB.URL()}})
	roundTrip(t, c2, "job-3")

	orchC.SetOffline(true)
	orchB.SetOffline(true)
	orchA.SetOffline(false)
	c2.Drop()
	c3 := orchA.Accept(t)
	c3.Handshake(t, proto.RegisterAck{Coordinators: []string{orchA.URL()}})
	roundTrip(t, c3, "job-4")
	if n := orchC.Dials(); n != 0 {
		t.Fatalf("the agent dialed C, which B said was gone, %d times", n)
	}
}

// futureFrame is a frame type this agent does not know, as the
// coordinators frame is to an agent older than it.
type futureFrame struct {
	Servers []string `json:"servers"`
}

func (*futureFrame) Type() string    { return "cluster.topology" }
func (*futureFrame) Validate() error { return nil }

// B140: a frame of a type the agent does not know — as a coordinators
// frame is to an agent older than it — is ignored: the connection stays,
// and the frames after it are handled.
//
// Proves B140 (docs/behaviours.md).
func TestAFrameOfAnUnknownTypeIsIgnored(t *testing.T) {
	orch := agenttest.New(t)
	h := startAgent(t, orch, nil)
	c, _ := h.connect(t, proto.RegisterAck{})
	dials := orch.Dials()
	c.Send(t, &futureFrame{Servers: []string{"https://elsewhere.example.test"}})
	roundTrip(t, c, "job-1")
	select {
	case <-c.Done():
		t.Fatal("the agent closed the connection after an unknown frame")
	case <-time.After(100 * time.Millisecond):
	}
	if orch.Dials() != dials {
		t.Fatal("the agent reconnected after an unknown frame")
	}
}
