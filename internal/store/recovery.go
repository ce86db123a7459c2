package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// sweepBatch bounds the jobs one sweep call changes; callers sweep again
// while a sweep returns a full batch.
const sweepBatch = 1000

// SweptJob is a job a requeue, sweep or agent loss changed.
type SweptJob struct {
	JobID   string
	RunID   string
	Name    string
	AgentID string // the agent that held it (close or cancel that connection)
	Epoch   int64  // the lease epoch it was held under
	Status  kiln.JobStatus
}

// SweepResult is what a requeue, sweep or agent loss did.
type SweepResult struct {
	Jobs []SweptJob
	Effects
}

// inActiveRuns restricts a query on jobs to unfinished runs, through the
// runs_status and jobs_run indexes: an unfinished job always belongs to an
// unfinished run, and there is no index on jobs by agent.
const inActiveRuns = "run_id IN (SELECT id FROM runs WHERE status IN ('pending', 'running', 'cancelling'))"

// agentHolds selects the jobs an agent holds (one parameter: its id),
// through the index jobs_agent.
var agentHolds = inActiveRuns + " AND agent_id = ? AND status IN (" + statusList(held) + ")"

// Requeue puts a dispatched job back in the queue because its agent rejected
// it (busy, draining), as runrules.Requeued decides: queued again, or failed
// once it used MaxAttempts dispatches, or cancelled if a stop mark reached it
// meanwhile.
func (q Queue) Requeue(ctx context.Context, l Lease, why string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		// Locked first, so the job is read as the rule must see it.
		if err := t.lockRunsOfJobs(ctx, []string{l.JobID}); err != nil {
			return err
		}
		cs, _, err := t.candidates(ctx, "id = ?", l.JobID)
		if err != nil {
			return err
		}
		moved, err := t.requeue(ctx, fromDispatched, cs, "AND lease_epoch = ?", []any{l.Epoch}, why)
		if err != nil {
			return err
		}
		res.Jobs = swept(cs, moved)
		if len(res.Jobs) == 0 {
			return t.refusal(ctx, l, "requeue")
		}
		return nil
	})
	res.Effects = eff
	return res, err
}

// SweepAckTimeouts requeues every dispatched job whose ack deadline passed
// (runrules.Requeued: attempts counted, failed past MaxAttempts). The caller
// closes the connections of the returned agents: an agent that does not
// acknowledge is not trusted with more work.
func (q Queue) SweepAckTimeouts(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		now := ms(t.now)
		cs, ids, err := t.candidates(ctx, "status = 'dispatched' AND ack_deadline <= ? ORDER BY ack_deadline LIMIT ?", now, sweepBatch)
		if err != nil || len(cs) == 0 {
			return err
		}
		if cs, err = t.freshCandidates(ctx, cs, ids); err != nil {
			return err
		}
		why := fmt.Sprintf("the agent did not acknowledge the job within %s", t.db.cfg.AckTimeout)
		moved, err := t.requeue(ctx, fromDispatched, cs, "AND ack_deadline <= ?", []any{now}, why)
		res.Jobs = swept(cs, moved)
		return err
	})
	res.Effects = eff
	return res, err
}

// AgentLost starts the recovery window for every job the agent held, as
// runrules.AgentGone decides: dispatched and running jobs become recovering
// until the window ends or the agent reconnects; jobs it was cancelling are
// cancelled.
func (q Queue) AgentLost(ctx context.Context, agentID string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		cs, ids, err := t.candidates(ctx, agentHolds, agentID)
		if err != nil || len(cs) == 0 {
			return err
		}
		if cs, err = t.freshCandidates(ctx, cs, ids); err != nil {
			return err
		}
		outs := make([]runrules.Outcome, len(cs))
		for i, c := range cs {
			outs[i] = runrules.AgentGone(c.Status)
		}
		moved, err := t.apply(ctx, fromLostAgent, cs, outs, "AND agent_id = ?", []any{agentID})
		res.Jobs = swept(cs, moved)
		return err
	})
	res.Effects = eff
	return res, err
}

// HoldRecovery keeps the agent's recovering jobs waiting until at least
// until (B127). A restarted orchestrator calls it for the agents of the
// previous process, which may have heard from that process until it died: an
// agent keeps running its jobs for its lease (drop_after + recovery_window −
// margin) after it last heard from a coordinator, so their recovery must not
// end before then plus the margin. Only later deadlines are written.
func (q Queue) HoldRecovery(ctx context.Context, agentID string, until time.Time) error {
	_, err := q.h.op(ctx, func(t *txn) error {
		_, err := t.exec(ctx, `UPDATE jobs SET recovery_deadline = ?, updated_at = ?
			WHERE `+inActiveRuns+` AND agent_id = ? AND status = 'recovering' AND recovery_deadline < ?`,
			ms(until), ms(t.now), agentID, ms(until))
		return err
	})
	return err
}

// RequeueUnstarted ends at once the recovery of the agent's recovering jobs
// that never started. The orchestrator calls it right after AgentLost when
// it saw the agent's connection close: a job the agent had not begun can run
// on another agent at once instead of waiting out the window. Each is queued
// again (its attempt counted), failed past MaxAttempts, or cancelled if a
// stop mark reached it (runrules.Requeued). Started jobs keep their window.
func (q Queue) RequeueUnstarted(ctx context.Context, agentID, why string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		where := "AND agent_id = ? AND started_at IS NULL"
		cs, ids, err := t.candidates(ctx, "status = 'recovering' "+where, agentID)
		if err != nil || len(cs) == 0 {
			return err
		}
		if cs, err = t.freshCandidates(ctx, cs, ids); err != nil {
			return err
		}
		moved, err := t.requeue(ctx, fromRecovering, cs, where, []any{agentID}, why)
		res.Jobs = swept(cs, moved)
		return err
	})
	res.Effects = eff
	return res, err
}

// ReconnectResult says which of a reconnecting agent's jobs it keeps.
type ReconnectResult struct {
	// Kept are the leases the agent still holds: recovering jobs are back to
	// running (or dispatched if they had not started).
	Kept []Lease
	// Refused are leases it no longer holds (requeued, finished, a newer
	// epoch): the agent must abandon those jobs.
	Refused []Lease
	// Resolved are the agent's recovering jobs it did not list: their
	// recovery ended at once (requeued or failed per on_agent_lost).
	Resolved []SweptJob
	Effects
}

// Reconnect is an agent coming back with the jobs it still has:
// runrules.AgentBack decides each listed job, runrules.WindowOver the
// recovering jobs it did not list.
func (q Queue) Reconnect(ctx context.Context, agentID string, inFlight []Lease) (ReconnectResult, error) {
	var res ReconnectResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = ReconnectResult{}
		orphans, orphanIDs, err := t.candidates(ctx, "agent_id = ? AND status = 'recovering'", agentID)
		if err != nil {
			return err
		}
		listed := make(map[string]bool, len(inFlight))
		ids := make([]string, 0, len(inFlight)+len(orphans))
		for _, l := range inFlight {
			if !listed[l.JobID] {
				listed[l.JobID] = true
				ids = append(ids, l.JobID)
			}
		}
		for _, id := range orphanIDs {
			if !listed[id] {
				ids = append(ids, id)
			}
		}
		if err := t.lockRunsOfJobs(ctx, ids); err != nil {
			return err
		}
		now, err := t.candidatesByID(ctx, ids)
		if err != nil {
			return err
		}
		if res.Kept, res.Refused, err = t.reclaim(ctx, agentID, inFlight, now); err != nil {
			return err
		}
		var gone []candidate
		for _, c := range orphans {
			if !listed[c.ID] {
				gone = append(gone, now[c.ID])
			}
		}
		if len(gone) == 0 {
			return nil
		}
		moved, err := t.windowOver(ctx, gone, "AND agent_id = ?", []any{agentID}, "the agent came back without the job")
		res.Resolved = swept(gone, moved)
		return err
	})
	res.Effects = eff
	return res, err
}

// reclaim gives a reconnecting agent back the jobs runrules.AgentBack says
// it still holds, resuming those waiting out their recovery window.
func (t *txn) reclaim(ctx context.Context, agentID string, inFlight []Lease, now map[string]candidate) (kept, refused []Lease, err error) {
	resume := map[kiln.JobStatus][]string{}
	for _, l := range inFlight {
		if _, to := runrules.AgentBack(now[l.JobID].Held, agentID, l.Epoch); to != "" && !slices.Contains(resume[to], l.JobID) {
			resume[to] = append(resume[to], l.JobID)
		}
	}
	resumed := map[string]bool{}
	for _, m := range []move{mReclaimRunning, mReclaimDispatched} {
		if len(resume[m.to]) == 0 {
			continue
		}
		moved, err := t.move(ctx, m, change{ids: resume[m.to],
			set: "recovery_deadline = NULL, ack_deadline = NULL, last_heartbeat_at = ?", args: []any{ms(t.now)},
			where: "AND agent_id = ?", wargs: []any{agentID}})
		if err != nil {
			return nil, nil, err
		}
		for _, j := range moved {
			resumed[j.ID] = true
		}
	}
	for _, l := range inFlight {
		keep, to := runrules.AgentBack(now[l.JobID].Held, agentID, l.Epoch)
		if keep && (to == "" || resumed[l.JobID]) {
			kept = append(kept, l)
		} else {
			refused = append(refused, l)
		}
	}
	return kept, refused, nil
}

// SweepRecovery ends the recovery window of jobs whose deadline passed, as
// runrules.WindowOver decides: a job that had not started is requeued (its
// attempt counted); a started job follows on_agent_lost — retry requeues it
// once, a second loss or fail ends it agent_lost.
func (q Queue) SweepRecovery(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		now := ms(t.now)
		cs, ids, err := t.candidates(ctx, "status = 'recovering' AND recovery_deadline <= ? ORDER BY recovery_deadline LIMIT ?", now, sweepBatch)
		if err != nil || len(cs) == 0 {
			return err
		}
		if cs, err = t.freshCandidates(ctx, cs, ids); err != nil {
			return err
		}
		why := fmt.Sprintf("the agent did not come back within the recovery window (%s)", t.db.cfg.RecoveryWindow)
		moved, err := t.windowOver(ctx, cs, "AND recovery_deadline <= ?", []any{now}, why)
		res.Jobs = swept(cs, moved)
		return err
	})
	res.Effects = eff
	return res, err
}

// SweepStale ends running (and cancelling) jobs whose agent stopped sending
// job heartbeats for longer than Config.StaleAfter: timed_out_stale
// (runrules.Stale). The caller disconnects the returned agents.
func (q Queue) SweepStale(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		cutoff := ms(t.now.Add(-t.db.cfg.StaleAfter))
		cs, _, err := t.candidates(ctx, "status IN ('running', 'cancelling') AND last_heartbeat_at < ? ORDER BY last_heartbeat_at LIMIT ?", cutoff, sweepBatch)
		if err != nil || len(cs) == 0 {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		outs := make([]runrules.Outcome, len(cs))
		for i := range cs {
			outs[i] = runrules.Stale(t.db.cfg.StaleAfter)
		}
		moved, err := t.apply(ctx, fromStale, cs, outs, "AND last_heartbeat_at < ?", []any{cutoff})
		res.Jobs = swept(cs, moved)
		return err
	})
	res.Effects = eff
	return res, err
}
