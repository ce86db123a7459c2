package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// monitor is the fleet's one periodic goroutine: every SweepInterval it
// checks agent heartbeats and token expiry, writes the buffered job
// heartbeats, and runs the store's sweeps; every RedriveInterval it offers
// the queue to idle agents again.
func (f *Fleet) monitor(ctx context.Context) {
	tick := time.NewTicker(f.cfg.SweepInterval)
	defer tick.Stop()
	lastRedrive := f.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := f.now()
		f.checkAgents(now)
		f.flushHeartbeats(ctx)
		f.flushAcks()
		// The leader's work: dead coordinators' agents first, so the stale
		// sweep never fails a job whose agent lost only its coordinator.
		if l, ok := f.cl.Leading(); ok {
			// A sole coordinator has no other whose agents could be
			// orphaned after its start (Run recovered the previous
			// process's).
			if !f.cl.Sole() {
				if err := f.recoverOrphans(ctx, l); err != nil {
					f.log.Error("fleet: recovering the jobs of dead coordinators' agents failed", "err", err)
				}
			}
			f.sweep(l)
		}
		f.dropHeldElsewhere(ctx)
		f.leaveIfIsolated()
		f.pushCoordinators()
		f.retryLosses()
		if now.Sub(lastRedrive) >= f.cfg.RedriveInterval {
			lastRedrive = now
			f.disp.redrive()
			f.disp.pruneWokeAt(now, 10*time.Minute)
		}
		if h := f.hooks.swept.Load(); h != nil {
			(*h)()
		}
	}
}

// checkAgents is the heartbeat monitor (B47): an agent
// silent longer than UnhealthyAfter is logged and gets no new jobs; one
// silent longer than DropAfter is disconnected — its jobs handed to
// recovery first, then unregistered, then its socket closed with 4004.
// First it closes the connections whose token expired.
func (f *Fleet) checkAgents(now time.Time) {
	for _, c := range f.reg.expired(now) {
		f.disconnect(c, closeCause{kind: "token_expired", code: proto.CloseAuthFailed, reason: "the agent token expired"})
	}
	for _, a := range f.reg.list() {
		if a.lost.Load() {
			continue
		}
		silent := now.Sub(time.Unix(0, a.c.lastSeen.Load()))
		switch {
		case silent > f.cfg.DropAfter:
			f.disconnect(a.c, closeCause{kind: "heartbeat_timeout", code: proto.CloseHeartbeat,
				reason: fmt.Sprintf("heartbeat timeout: nothing received for %s", silent.Round(time.Second))})
			continue
		case silent > f.cfg.UnhealthyAfter:
			a.mu.Lock()
			was := a.unhealthy
			a.unhealthy = true
			a.mu.Unlock()
			if !was {
				f.log.Warn("agent unhealthy: no heartbeat", "agent_id", a.id, "silent", silent.Round(time.Second))
				f.disp.refreshReasons()
			}
		default:
			a.mu.Lock()
			was := a.unhealthy
			a.unhealthy = false
			a.mu.Unlock()
			if was {
				f.log.Info("agent healthy again", "agent_id", a.id)
				f.disp.agentFree(a)
			}
		}
	}
}

// sweep runs the store's sweeps until each has caught up. Each goes
// through the committer like every other job write of the fleet, so its
// effects reach the engine in commit order and it never interleaves with an
// operation about the same agent.
func (f *Fleet) sweep(l store.LeaderLease) {
	for _, s := range []struct {
		name  string
		run   func(store.Queue, context.Context) (store.SweepResult, error)
		after func([]store.SweptJob)
	}{
		{"ack", store.Queue.SweepAckTimeouts, f.ackTimedOut},
		{"recovery", store.Queue.SweepRecovery, nil},
		{"stale", store.Queue.SweepStale, f.staleJobs},
	} {
		for {
			var res store.SweepResult
			err := f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
				res = store.SweepResult{}
				if err := fence(ctx, tx, l); err != nil {
					return store.Effects{}, err
				}
				var err error
				res, err = s.run(tx.Queue(), ctx)
				return res.Effects, err
			})
			if errors.Is(err, store.ErrConflict) {
				return // the leader lease was lost meanwhile
			}
			if err != nil {
				f.log.Error("fleet: a sweep failed", "sweep", s.name, "err", err)
				break
			}
			if s.after != nil {
				s.after(res.Jobs)
			}
			if len(res.Jobs) < 1000 {
				break
			}
		}
	}
}

// staleJobs tells the agents of jobs the stale sweep ended to stop them.
func (f *Fleet) staleJobs(jobs []store.SweptJob) {
	for _, j := range jobs {
		f.abandon(j.AgentID, j.JobID, j.Epoch, "no job heartbeat from the agent for too long; the job timed out")
	}
}

// ackTimedOut disconnects the agents that did not acknowledge a dispatch in
// time (close 4031): an agent that does not answer is not trusted with more
// work, and its other jobs take the disconnect path.
func (f *Fleet) ackTimedOut(jobs []store.SweptJob) {
	seen := map[string]bool{}
	for _, j := range jobs {
		a := f.reg.get(j.AgentID)
		if a == nil {
			continue
		}
		// The agent is lost before its slot is freed: the requeue just
		// committed wakes the dispatcher, which would otherwise hand the
		// job straight back to the agent being disconnected (B30).
		a.lost.Store(true)
		a.finish(j.JobID, j.Epoch)
		if seen[a.id] {
			continue
		}
		seen[a.id] = true
		f.disconnect(a.c, closeCause{kind: "ack_timeout", code: proto.CloseDispatchAckLate,
			reason: fmt.Sprintf("job %s was not acknowledged in time", j.JobID)})
	}
}

// abandon tells an agent to stop a job it no longer holds (force) and
// frees the slot.
func (f *Fleet) abandon(agentID, jobID string, epoch int64, reason string) {
	a := f.reg.get(agentID)
	if a == nil {
		return
	}
	if a.finish(jobID, epoch) {
		f.disp.agentFree(a)
	}
	_ = a.c.send(&proto.Cancel{JobID: jobID, LeaseEpoch: epoch, Force: true, Reason: reason})
}

// leases buffers per-lease writes between sweeps — job heartbeats, and
// acknowledgements that job.status running did not make moot — so that a
// fleet of jobs costs one write per sweep, not one per frame.
type leases struct {
	mu sync.Mutex
	m  map[store.Lease]*agent
}

func (h *leases) add(l store.Lease, a *agent) {
	h.mu.Lock()
	if h.m == nil {
		h.m = map[store.Lease]*agent{}
	}
	h.m[l] = a
	h.mu.Unlock()
}

func (h *leases) remove(l store.Lease) {
	h.mu.Lock()
	delete(h.m, l)
	h.mu.Unlock()
}

func (h *leases) take() map[store.Lease]*agent {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.m
	h.m = nil
	return m
}

// forget drops an agent's buffered writes and says how many.
func (h *leases) forget(a *agent) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for l, owner := range h.m {
		if owner == a {
			delete(h.m, l)
			n++
		}
	}
	return n
}

// flushAcks writes the acknowledgements deferred since the last sweep, so
// the ack sweep that follows sees them.
func (f *Fleet) flushAcks() {
	m := f.acks.take()
	if len(m) == 0 {
		return
	}
	err := f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		for l := range m {
			if err := tx.Jobs().Ack(ctx, l); err != nil && !refusal(err) {
				return store.Effects{}, err
			}
		}
		return store.Effects{}, nil
	})
	if err != nil {
		f.log.Error("fleet: writing job acknowledgements failed", "err", err)
		for l, a := range m { // the next sweep tries again
			f.acks.add(l, a)
		}
	}
}

func (f *Fleet) flushHeartbeats(ctx context.Context) {
	m := f.hb.take()
	if len(m) == 0 {
		return
	}
	leases := make([]store.Lease, 0, len(m))
	for l := range m {
		leases = append(leases, l)
	}
	var stale []store.Lease
	err := f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		var err error
		stale, err = tx.Jobs().Heartbeat(ctx, leases...)
		return store.Effects{}, err
	})
	if err != nil {
		f.log.Error("fleet: writing job heartbeats failed", "err", err)
		return
	}
	for _, l := range stale {
		if a := m[l]; a != nil {
			f.abandon(a.id, l.JobID, l.Epoch, "the agent no longer holds this job")
		}
	}
}

// retryLoss remembers an agent whose loss could not be recorded.
func (f *Fleet) retryLoss(agentID string, cause closeCause) {
	f.lossMu.Lock()
	defer f.lossMu.Unlock()
	if f.losses == nil {
		f.losses = map[string]closeCause{}
	}
	f.losses[agentID] = cause
}

// retryLosses records the losses that failed, unless the agent registered
// again (its registration handles its jobs).
func (f *Fleet) retryLosses() {
	f.lossMu.Lock()
	losses := f.losses
	f.losses = nil
	f.lossMu.Unlock()
	for id, cause := range losses {
		if f.reg.get(id) == nil {
			f.loseJobs(id, cause)
		}
	}
}
