package fleet

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// Durable frames arriving together are acknowledged together: one ack
// covers every frame stored before it. The last frame before the agent
// falls silent is acknowledged too, within ackDelay, with nothing else
// written to carry it.
func TestAcksCoverFramesStoredTogether(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		_, c, d := acceptedJob(t, b)
		c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
		c.waitAck(c.seq) // the running status alone: acknowledged by the timer

		before := c.acks.Load()
		const frames = 40
		for i := range frames {
			c.send(&proto.Log{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Step: 0,
				Lines: []proto.LogLine{{Seq: uint64(i + 1), Stream: proto.StreamStdout, Text: "line"}}})
		}
		c.waitAck(c.seq)
		if n := c.acks.Load() - before; n < 1 || n >= frames {
			t.Fatalf("%d frames sent together got %d acks; want fewer, the last covering all", frames, n)
		}
	})
}

// A job.status running frame is handed to the committer without the
// reader waiting for it, but its acknowledgement waits for the commit:
// while the committer is held, neither it nor a log frame the agent sends
// after it is acknowledged (an ack covers every frame before it); once the
// start is stored both are, and the job is running.
// Proves B155 (docs/behaviours.md).
func TestAStartIsAcknowledgedOnlyOnceStored(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h, c, d := acceptedJob(t, b)

		held, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		free := func() { once.Do(func() { close(release) }) }
		t.Cleanup(free)
		h.f.cm.async(func(context.Context, *store.Tx) (store.Effects, error) {
			close(held)
			<-release
			return store.Effects{}, nil
		})
		<-held
		c.send(&proto.JobStatus{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Status: kiln.JobRunning, Time: time.Now()})
		running := c.seq
		c.send(&proto.Log{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Step: 0,
			Lines: []proto.LogLine{{Seq: 1, Stream: proto.StreamStdout, Text: "line"}}})
		deadline := time.Now().Add(20 * ackDelay)
		for time.Now().Before(deadline) {
			if got := c.acked.Load(); got >= running {
				t.Fatalf("ack %d covers the start (seq %d) before it was stored", got, running)
			}
			time.Sleep(ackDelay / 5)
		}
		if j := h.job(d.JobID); j.Status != kiln.JobDispatched {
			t.Fatalf("job is %s while the committer is held", j.Status)
		}
		free()
		c.waitAck(c.seq)
		h.waitStatus(d.JobID, kiln.JobRunning)
	})
}

// acceptedJob starts an orchestrator with one agent connected and one job
// dispatched to it, which the agent has accepted (job.ack).
func acceptedJob(t *testing.T, b storetest.Backend) (*harness, *client, *proto.Dispatch) {
	t.Helper()
	h := start(t, b, options{cfg: fastConfig()})
	_, secret := h.token(store.AgentTokenSpec{})
	c, _ := h.connect(secret, reg{id: "a"})
	h.run(job("j", "linux"))
	d := expect[*proto.Dispatch](c)
	c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
	return h, c, d
}

// A start the orchestrator could not store is never acknowledged, nor any
// frame after it: the agent is told (an internal error) and the connection
// closes, so the agent replays its frames from the start on.
// Proves B155 (docs/behaviours.md).
func TestAStartThatFailsToStoreIsNeverAcknowledged(t *testing.T) {
	backends(t, func(t *testing.T, b storetest.Backend) {
		h, c, d := acceptedJob(t, b)
		srv := h.f.reg.get("a").c
		// What the reader does with a job.status running (seq 1) whose
		// commit fails, the log frame after it (seq 2) stored.
		o := &op{done: make(chan error, 1)}
		o.done <- errors.New("the database went away")
		srv.gateStart(1, o, srv.startStored(srv.agent.Load(), d.JobID))
		srv.ack(2)
		if e := c.errorFrame(); e.Code != proto.ErrInternal {
			t.Fatalf("error frame %+v, want %s", e, proto.ErrInternal)
		}
		if code, _ := c.closed(); code != proto.CloseInternal {
			t.Fatalf("closed with %d, want %d", code, proto.CloseInternal)
		}
		if got := c.acked.Load(); got != 0 {
			t.Fatalf("ack %d sent past a start that was not stored", got)
		}
	})
}
