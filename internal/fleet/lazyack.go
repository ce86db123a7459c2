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
	seq   uint64     // every durable frame up to seq is handled; 0: none pending
	since time.Time  // when the oldest frame it covers was handled
	timer *time.Timer
	sent  uint64 // the highest seq acknowledged
	// starts are the job starts the reader handed to the committer
	// without waiting (startGate), oldest first: an ack covering one
	// leaves only once it is known stored.
	starts []*startGate
	// failed: a start could not be stored; nothing from it on is
	// acknowledged, and the connection is closing (the agent replays).
	failed bool
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
// is stored, or is a start in a.starts. The pending acknowledgement leaves
// now if the reader corked a write it is about to send or the oldest frame
// it covers was handled ackDelay ago, otherwise within ackDelay (flushAck)
// unless another frame arrives first.
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
	if c.net.Corked() || wait <= 0 {
		c.sendPendingLocked()
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
	c.sendPendingLocked()
}

// sendPendingLocked sends the pending acknowledgement, first waiting for
// the starts it covers to be stored. It is called with a.mu held and
// returns with it held, but releases it while it waits: the reader goes
// on meanwhile, and a frame it stores may join the ack. A start that
// failed is not acknowledged, nor anything after it: the connection is
// closed and the agent replays from there.
func (c *conn) sendPendingLocked() {
	a := &c.acks
	for a.seq > 0 && !a.failed {
		if len(a.starts) > 0 && a.starts[0].seq <= a.seq {
			g := a.starts[0]
			if !g.settled() {
				a.mu.Unlock()
				g.wait()
				a.mu.Lock()
				continue
			}
			a.starts = a.starts[1:]
			if g.cause != nil {
				a.failed = true
				if g.seq-1 > a.sent {
					a.sent = g.seq - 1
					c.sendAck(g.seq - 1)
				}
				a.seq = 0
				go c.f.disconnect(c, *g.cause)
				return
			}
			continue
		}
		seq := a.seq
		a.seq = 0
		if seq > a.sent {
			a.sent = seq
			c.sendAck(seq)
		}
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

// startGate is a job.status running frame handed to the committer without
// the reader waiting for its commit: the reader reads on, so the job's end,
// when the agent sends it right after, is stored in the same transaction
// (the committer folds the two into one move). Its acknowledgement waits
// for the commit (sendPendingLocked); whoever waits first handles the
// result, once.
type startGate struct {
	seq   uint64
	o     *op
	then  func(error) *closeCause // the result's handling: nil, or why the connection must close
	once  sync.Once
	done  chan struct{} // closed once the result is handled
	cause *closeCause   // set before done closes
}

// gateStart records a start the committer is storing under the frame seq.
func (c *conn) gateStart(seq uint64, o *op, then func(error) *closeCause) {
	a := &c.acks
	a.mu.Lock()
	defer a.mu.Unlock()
	a.starts = append(a.starts, &startGate{seq: seq, o: o, then: then, done: make(chan struct{})})
}

func (g *startGate) settled() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// wait waits for the start's commit and handles its result.
func (g *startGate) wait() {
	g.once.Do(func() {
		g.cause = g.then(<-g.o.done)
		close(g.done)
	})
}
