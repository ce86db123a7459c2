package fleet

import (
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
		h := start(t, b, options{cfg: fastConfig()})
		_, secret := h.token(store.AgentTokenSpec{})
		c, _ := h.connect(secret, reg{id: "a"})
		h.run(job("j", "linux"))
		d := expect[*proto.Dispatch](c)
		c.send(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
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
