package fleet

import (
	"sync"
	"time"
)

// ackDelay bounds how long an agent waits for the acknowledgement of a
// durable frame the orchestrator has stored, while the agent sends nothing
// more (a frame it sends meanwhile is acknowledged with it, once handled).
// Acknowledgements are cumulative, so one covers every frame stored before
// it: an agent streaming logs, or ending a job just after starting it,
// gets one ack for the lot instead of one write(2) per frame — each a
// socket write on the server and a wake-up of the agent's reader. An ack
// also leaves at once with any write the reader corked (a job's end and
// the agent's next job).
const ackDelay = 5 * time.Millisecond

// lazyAck is a connection's acknowledgement not sent yet.
type lazyAck struct {
	mu    sync.Mutex // held while an ack is written: acks leave in order
	seq   uint64     // every durable frame up to seq is stored; 0: none pending
	since time.Time  // when the oldest frame it covers was stored
	timer *time.Timer
}

// pauseAck holds a pending acknowledgement while the reader handles the
// frame it just read: the end of that frame's handling (ack) sends it,
// with the frame's own when that frame is durable — at saturation a job's
// start is still unacknowledged when its end arrives, and both are
// covered by the write that carries the agent's next job.
func (c *conn) pauseAck() {
	a := &c.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seq > 0 && a.timer != nil {
		a.timer.Stop()
	}
}

// ack ends a frame's handling; seq > 0 says every durable frame up to seq
// is stored. The pending acknowledgement leaves now if the reader corked a
// write it is about to send or the oldest frame it covers was stored
// ackDelay ago, otherwise within ackDelay (flushAck) unless another frame
// arrives first.
func (c *conn) ack(seq uint64) {
	a := &c.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if seq > 0 {
		if a.seq == 0 {
			a.since = now
		}
		a.seq = seq
	}
	if a.seq == 0 {
		return
	}
	wait := a.since.Add(ackDelay).Sub(now)
	if c.net.isCorked() || wait <= 0 {
		seq := a.seq
		a.seq = 0
		c.sendAck(seq)
		return
	}
	if a.timer == nil {
		a.timer = time.AfterFunc(wait, c.flushAck)
	} else {
		a.timer.Reset(wait)
	}
}

// flushAck sends the pending acknowledgement, if any.
func (c *conn) flushAck() {
	a := &c.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.seq > 0 {
		seq := a.seq
		a.seq = 0
		c.sendAck(seq)
	}
}

// stopAcks stops the ack timer once the connection's reader is done; a
// close with a code sends what is pending first (conn.close).
func (c *conn) stopAcks() {
	a := &c.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
	}
}
