package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// closeCause is why a connection ends and how its agent's jobs are treated.
type closeCause struct {
	kind   string // names the path, for stats and logs: "heartbeat_timeout", "ack_timeout", …
	code   int    // the close code to send; 0: the socket is already gone
	reason string // the close frame's reason (at most 123 bytes are sent)
	err    error  // the read error that ended the connection, if any
	// keepUnstarted: the agent is back at once (superseded by its own new
	// connection), so its unstarted jobs wait for the new connection's
	// in_flight instead of being requeued.
	keepUnstarted bool
	// noStore: the orchestrator is shutting down; the agent's jobs are left
	// as they are for the leader to recover (Cluster).
	noStore bool
	// holdFor: the jobs' recovery lasts at least this long from now, not
	// only the window (B127; see Queue.HoldRecovery).
	holdFor time.Duration
}

func causeRead(err error) closeCause {
	c := closeCause{kind: "closed_by_agent", err: err}
	if websocket.CloseStatus(err) == -1 {
		c.kind = "read_error"
	}
	if errors.Is(err, websocket.ErrMessageTooBig) {
		// coder/websocket has sent close 1009 with its reason.
		c.kind = "message_too_big"
	}
	return c
}

func causeClosed() closeCause { return closeCause{kind: "closed"} }

func causeShutdown() closeCause {
	return closeCause{kind: "shutdown", code: proto.CloseGoingAway, reason: "the orchestrator is shutting down", keepUnstarted: true, noStore: true}
}

// causeMoved: the agent registered on another coordinator, which holds
// its jobs now; this one's connection is stale and leaves the store alone.
func causeMoved() closeCause {
	return closeCause{kind: "moved", code: proto.CloseGoingAway, reason: "the agent is connected to another coordinator", keepUnstarted: true, noStore: true}
}

func causeSuperseded() closeCause {
	return closeCause{kind: "superseded", code: proto.CloseSuperseded, reason: "superseded by a newer connection of the same agent", keepUnstarted: true}
}

// released counts what the disconnect function handed back, per kind of
// waiter (B48).
type released struct {
	// Store: the agent's jobs handed to the store's recovery (AgentLost):
	// held jobs entered the recovery window, and the unstarted ones were
	// requeued at once (RequeueUnstarted).
	Lost, Requeued int
	// (a) Slots: the registry's active-job slots; the agent also left the
	// idle index (its id no longer matches any queue key).
	Slots int
	// (b) AwaitingAck: dispatches sent and not yet acknowledged, and
	// cancels waiting for their dispatch.
	AwaitingAck, Cancels int
	// (c) Heartbeats and Acks: buffered job heartbeats and deferred
	// acknowledgements not yet written.
	Heartbeats, Acks int
	// (d) StepFiles: open step log files (logstore.CloseStep), which live
	// viewers' files also are.
	StepFiles int
}

// disconnect is the one way a connection ends — the agent closed it, a
// read failed, the heartbeat monitor dropped it, a dispatch went
// unacknowledged, its token was revoked or expired, a newer connection
// superseded it, it broke the protocol or the rate limits, or the
// orchestrator shuts down. In that order it: hands the agent's jobs to the
// store (recovery window; unstarted jobs requeued at once), releases every
// waiter on the agent, unregisters it, and closes the socket. Any goroutine
// may call it, any number of times; the first cause wins.
func (f *Fleet) disconnect(c *conn, cause closeCause) {
	first := c.closing.CompareAndSwap(false, true)
	if first {
		c.cause.Store(&cause)
		close(c.done)
	}
	if s := f.reg.slotOf(c); s != nil {
		s.mu.Lock()
		f.releaseLocked(c, *c.cause.Load())
		s.mu.Unlock()
	}
	f.reg.forget(c)
	if first {
		f.stats.disconnect(cause.kind)
		if a := c.agent.Load(); a != nil {
			f.log.Info("agent disconnected", "agent_id", a.id, "cause", cause.kind, "err", cause.err)
		}
		c.close(cause)
	}
}

// supersede ends an older connection of the agent id the caller, holding
// the id's slot, is registering with the same token.
func (f *Fleet) supersede(old *conn) {
	cause := causeSuperseded()
	first := old.closing.CompareAndSwap(false, true)
	if first {
		old.cause.Store(&cause)
		close(old.done)
	}
	f.releaseLocked(old, cause)
	if first {
		f.stats.disconnect(cause.kind)
		old.close(cause)
	}
}

// releaseLocked does the disconnect handling of a registered connection;
// the caller holds its id slot's mutex.
func (f *Fleet) releaseLocked(c *conn, cause closeCause) {
	if c.released {
		return
	}
	c.released = true
	a := c.agent.Load()
	if a == nil || f.reg.get(a.id) != a {
		return
	}
	// From here no claim picks the agent; a claim already in a batch
	// commits before the loss below, which then covers its job.
	a.lost.Store(true)
	var rel released
	if !cause.noStore {
		rel.Lost, rel.Requeued = f.loseJobs(a.id, cause)
	}
	a.releaseWaiters(f.logs, &rel)
	rel.Heartbeats = f.hb.forget(a)
	rel.Acks = f.acks.forget(a)
	f.reg.unregister(a)
	f.disp.refreshReasons()
	if s := f.cfg.Scaler; s != nil && !cause.noStore && cause.kind != "superseded" {
		s.Gone(a.id, cause.kind, rel.Lost)
	}
	if h := f.hooks.released.Load(); h != nil {
		(*h)(a.id, cause, rel)
	}
}

// loseJobs hands the agent's jobs to the store's recovery: held jobs enter
// the recovery window, and (unless the agent is back at once) those that
// never started are requeued now, so they run elsewhere without waiting
// out the window. A store failure is retried by the monitor.
func (f *Fleet) loseJobs(agentID string, cause closeCause) (lost, requeued int) {
	err := f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		lost, requeued = 0, 0
		// Only while the database names this coordinator as the agent's
		// holder: one that reconnected elsewhere is the other's now (B143).
		held, err := tx.Auth().ReleaseAgent(ctx, agentID, f.cl.ID())
		if err != nil || !held {
			return store.Effects{}, err
		}
		res, err := tx.Queue().AgentLost(ctx, agentID)
		if err != nil {
			return store.Effects{}, err
		}
		eff := res.Effects
		lost = len(res.Jobs)
		if cause.holdFor > 0 && lost > 0 {
			if err := tx.Queue().HoldRecovery(ctx, agentID, f.now().Add(cause.holdFor)); err != nil {
				return store.Effects{}, err
			}
		}
		if !cause.keepUnstarted {
			rq, err := tx.Queue().RequeueUnstarted(ctx, agentID, "the agent's connection closed before the job started")
			if err != nil {
				return store.Effects{}, err
			}
			requeued = len(rq.Jobs)
			mergeEffects(&eff, rq.Effects)
		}
		return eff, nil
	})
	if err != nil {
		f.log.Error("fleet: recording a lost agent failed; retrying at the next sweep", "agent_id", agentID, "err", err)
		f.retryLoss(agentID, cause)
	}
	return lost, requeued
}

// releaseWaiters empties the agent's slots, pending dispatches and cancels,
// and closes its open step files.
func (a *agent) releaseWaiters(logs *logstore.Store, rel *released) {
	a.mu.Lock()
	jobs, cancels := a.jobs, a.cancels
	a.jobs, a.cancels = map[string]*heldJob{}, nil
	a.mu.Unlock()
	rel.Slots = len(jobs)
	rel.Cancels = len(cancels)
	for id, j := range jobs {
		if !j.acked {
			rel.AwaitingAck++
		}
		for step := range j.steps {
			logs.CloseStep(logstore.Ref{RunID: j.runID, JobID: id, Epoch: j.epoch, Step: step})
			rel.StepFiles++
		}
	}
}

func mergeEffects(dst *store.Effects, src store.Effects) {
	dst.Queued = append(dst.Queued, src.Queued...)
	dst.Finished = append(dst.Finished, src.Finished...)
	dst.Cancel = append(dst.Cancel, src.Cancel...)
	dst.Runs = append(dst.Runs, src.Runs...)
}
