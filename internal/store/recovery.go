package store

import (
	"context"
	"fmt"
	"slices"
	"sort"

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

// candidate is a job a sweep or an agent's loss looked at, with what the
// recovery rules read of it.
type candidate struct {
	ID, RunID, Name string
	runrules.Held
}

const candidateCols = "id, run_id, name, COALESCE(agent_id, ''), lease_epoch, status, stop, attempts, started_at IS NOT NULL, on_agent_lost = 'retry', lost_count"

func (t *txn) candidates(ctx context.Context, where string, args ...any) ([]candidate, []string, error) {
	rows, err := t.query(ctx, "SELECT "+candidateCols+" FROM jobs WHERE "+where, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var cs []candidate
	var ids []string
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.ID, &c.RunID, &c.Name, &c.AgentID, &c.Epoch, &c.Status, &c.Stopped, &c.Attempts,
			&c.Started, &c.RetryIfLost, &c.LostCount); err != nil {
			return nil, nil, err
		}
		cs = append(cs, c)
		ids = append(ids, c.ID)
	}
	return cs, ids, rows.Err()
}

// lockCandidates locks the runs of candidates, in id order.
func (t *txn) lockCandidates(ctx context.Context, cs []candidate) error {
	runs := make([]string, 0, len(cs))
	for _, c := range cs {
		runs = append(runs, c.RunID)
	}
	return t.lockRuns(ctx, runs)
}

// freshCandidates locks the runs of candidates and returns them as they are
// under the lock, for a rule to decide on: on PostgreSQL another transaction
// (a cancel, fail_fast) may have changed them between the query that found
// them and the lock. SQLite's one writer saw them as they are.
func (t *txn) freshCandidates(ctx context.Context, cs []candidate, ids []string) ([]candidate, error) {
	unlocked := false
	for _, c := range cs {
		unlocked = unlocked || !t.locked[c.RunID]
	}
	if err := t.lockCandidates(ctx, cs); err != nil || !unlocked || t.db.dialect.name() == "sqlite" {
		return cs, err
	}
	now := make(map[string]candidate, len(cs))
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		got, _, err := t.candidates(ctx, "id IN ("+marks(len(chunk))+")", anys(chunk)...)
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			now[c.ID] = c
		}
	}
	for i, c := range cs {
		if n, ok := now[c.ID]; ok {
			cs[i] = n
		}
	}
	return cs, nil
}

// swept pairs what a sweep moved with what the jobs were before.
func swept(cs []candidate, moved []movedJob) []SweptJob {
	status := make(map[string]kiln.JobStatus, len(moved))
	for _, m := range moved {
		status[m.ID] = m.Status
	}
	var out []SweptJob
	for _, c := range cs {
		if s, ok := status[c.ID]; ok {
			out = append(out, SweptJob{JobID: c.ID, RunID: c.RunID, Name: c.Name, AgentID: c.AgentID, Epoch: c.Epoch, Status: s})
		}
	}
	return out
}

// verdictMoves maps the recovery rules' verdicts onto the moves that carry
// them out for jobs in one kind of status.
type verdictMoves map[runrules.Verdict]move

var (
	fromDispatched = verdictMoves{runrules.Cancel: mRequeueStopped, runrules.GiveUp: mRequeueGiveUp, runrules.Requeue: mRequeue}
	fromRecovering = verdictMoves{runrules.Cancel: mCancelRecovering, runrules.GiveUp: mRecoverGiveUp,
		runrules.Requeue: mRecoverRequeue, runrules.Retry: mRecoverRequeue, runrules.Lose: mRecoverLost}
	fromLostAgent = verdictMoves{runrules.AwaitAgent: mLose, runrules.Cancel: mLoseCancelling}
	fromStale     = verdictMoves{runrules.TimeOut: mStale}
)

// requeueSet clears the lease and restarts the queue timeout.
func (t *txn) requeueSet(why string) (string, []any) {
	reason := ReasonWaiting + " (requeued: " + why + ")"
	return `agent_id = NULL, dispatched_at = NULL, ack_deadline = NULL, started_at = NULL,
		last_heartbeat_at = NULL, recovery_deadline = NULL,
		expires_at = CASE WHEN expires_at IS NULL OR queued_at IS NULL THEN expires_at ELSE ? + (expires_at - queued_at) END,
		queued_at = ?, pending_reason = ?, pending_since = ?, error = ?`,
		[]any{ms(t.now), ms(t.now), reason, ms(t.now), why}
}

// apply carries out the rules' outcomes for candidates (outs[i] is cs[i]'s):
// jobs with the same outcome move together, each move a compare-and-set
// further guarded by where (the lease, the deadline that made them due).
// Requeued jobs get their steps reset for the next attempt.
func (t *txn) apply(ctx context.Context, vm verdictMoves, cs []candidate, outs []runrules.Outcome, where string, wargs []any) ([]movedJob, error) {
	type outcome struct {
		v      runrules.Verdict
		reason string
	}
	groups := map[outcome][]string{}
	var order []outcome
	for i, o := range outs {
		if _, ok := vm[o.Verdict]; !ok {
			continue // Leave, or a verdict no job in these statuses gets
		}
		k := outcome{o.Verdict, o.Reason}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], cs[i].ID)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i].v < order[j].v })
	var out, requeued []movedJob
	for _, k := range order {
		c := change{ids: groups[k], where: where, wargs: wargs}
		switch k.v {
		case runrules.Requeue, runrules.Retry:
			c.set, c.args = t.requeueSet(k.reason)
			if k.v == runrules.Retry {
				c.set += ", lost_count = lost_count + 1"
			}
		case runrules.AwaitAgent:
			c.set, c.args = "recovery_deadline = ?", []any{ms(t.now.Add(t.db.cfg.RecoveryWindow))}
		default:
			c.err = k.reason
		}
		moved, err := t.move(ctx, vm[k.v], c)
		if err != nil {
			return nil, err
		}
		if k.v == runrules.Requeue || k.v == runrules.Retry {
			requeued = append(requeued, moved...)
		}
		out = append(out, moved...)
	}
	return out, t.resetSteps(ctx, requeued)
}

// requeue decides candidates going back to the queue with runrules.Requeued.
func (t *txn) requeue(ctx context.Context, vm verdictMoves, cs []candidate, where string, wargs []any, why string) ([]movedJob, error) {
	outs := make([]runrules.Outcome, len(cs))
	for i, c := range cs {
		outs[i] = runrules.Requeued(c.Held, t.db.cfg.MaxAttempts, why)
	}
	return t.apply(ctx, vm, cs, outs, where, wargs)
}

// windowOver decides recovering candidates whose agent is gone with
// runrules.WindowOver.
func (t *txn) windowOver(ctx context.Context, cs []candidate, where string, wargs []any, why string) ([]movedJob, error) {
	outs := make([]runrules.Outcome, len(cs))
	for i, c := range cs {
		outs[i] = runrules.WindowOver(c.Held, t.db.cfg.MaxAttempts, why)
	}
	return t.apply(ctx, fromRecovering, cs, outs, where, wargs)
}

// resetSteps clears the steps of requeued jobs for their next attempt.
func (t *txn) resetSteps(ctx context.Context, jobs []movedJob) error {
	for start := 0; start < len(jobs); start += 500 {
		chunk := jobs[start:min(start+500, len(jobs))]
		ids := make([]any, len(chunk))
		for i, j := range chunk {
			ids[i] = j.ID
		}
		if _, err := t.exec(ctx, `UPDATE steps SET status = 'pending', exit_code = NULL, error = NULL, started_at = NULL, finished_at = NULL
			WHERE job_id IN (`+marks(len(ids))+`)`, ids...); err != nil {
			return fmt.Errorf("reset steps: %w", err)
		}
	}
	return nil
}

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
		cs, ids, err := t.candidates(ctx, inActiveRuns+" AND agent_id = ? AND status IN ("+statusList(held)+")", agentID)
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
		// Every job involved, as it is under the lock.
		now := make(map[string]candidate, len(ids))
		for start := 0; start < len(ids); start += 500 {
			chunk := ids[start:min(start+500, len(ids))]
			got, _, err := t.candidates(ctx, "id IN ("+marks(len(chunk))+")", anys(chunk)...)
			if err != nil {
				return err
			}
			for _, c := range got {
				now[c.ID] = c
			}
		}
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
				return err
			}
			for _, j := range moved {
				resumed[j.ID] = true
			}
		}
		for _, l := range inFlight {
			keep, to := runrules.AgentBack(now[l.JobID].Held, agentID, l.Epoch)
			if keep && (to == "" || resumed[l.JobID]) {
				res.Kept = append(res.Kept, l)
			} else {
				res.Refused = append(res.Refused, l)
			}
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
