package fleet

import (
	"context"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// What the fleet does for scalers (internal/scaler): a scaler's agent takes
// the job it was started for while that job is still queued (else any it
// accepts), takes one job only, and is drained once that job ended.

// took tells the scaler which job its agent was sent.
func (f *Fleet) took(a *agent, got []store.Claimed) {
	if f.cfg.Scaler == nil || !a.oneJob {
		return
	}
	for _, c := range got {
		f.cfg.Scaler.Took(a.id, c.RunID, c.JobID)
	}
}

// claimBound claims the job a scaler started the agent for and sends it;
// false when the job is no longer there to take.
func (d *dispatcher) claimBound(ctx context.Context, a *agent, jobID string) bool {
	if a.freeSlots() == 0 {
		return false
	}
	var got *store.Claimed
	err := d.f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		var err error
		if got, err = tx.Queue().ClaimJob(ctx, a.id, a.labels, jobID); err != nil || got == nil || !got.RunStarted {
			return store.Effects{}, err
		}
		return store.Effects{Runs: []store.RunChange{{ID: got.RunID, Status: kiln.RunRunning}}}, nil
	})
	if err != nil {
		d.f.log.Error("fleet: claiming the job a scaler's agent was started for failed", "agent_id", a.id, "job_id", jobID, "err", err)
		return false
	}
	if got == nil {
		return false
	}
	cs := a.hold([]store.Claimed{*got})
	if len(cs) == 0 {
		return true
	}
	d.f.took(a, cs)
	d.deliverAll(ctx, a, cs)
	return true
}

// bind has the dispatcher give the agent its job first.
func (d *dispatcher) bind(a *agent, jobID string) {
	d.mu.Lock()
	d.bound[a] = jobID
	d.mu.Unlock()
	d.signal()
}

// IdleAccepting reports whether a connected agent with a free slot accepts
// the requirement.
func (f *Fleet) IdleAccepting(r kiln.Requirement) bool {
	for _, a := range f.reg.list() {
		if a.labels.Accepts(r) && a.freeSlots() > 0 {
			return true
		}
	}
	return false
}

// Idle reports whether the agent is connected and holds no job.
func (f *Fleet) Idle(agentID string) bool {
	a := f.reg.get(agentID)
	if a == nil || !a.live.Load() || a.lost.Load() {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.jobs) == 0
}

// RefreshReasons has the pending reasons of waiting jobs written again.
func (f *Fleet) RefreshReasons() { f.disp.refreshReasons() }
