package store

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnci/kiln"
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

// candidate is a job a sweep looked at before changing it.
type candidate struct {
	ID, RunID, Name, AgentID string
	Epoch                    int64
}

func (t *txn) candidates(ctx context.Context, where string, args ...any) ([]candidate, []string, error) {
	rows, err := t.query(ctx, "SELECT id, run_id, name, COALESCE(agent_id, ''), lease_epoch FROM jobs WHERE "+where, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var cs []candidate
	var ids []string
	for rows.Next() {
		var c candidate
		if err := rows.Scan(&c.ID, &c.RunID, &c.Name, &c.AgentID, &c.Epoch); err != nil {
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

// swept pairs what a sweep moved with what the jobs were before.
func swept(cs []candidate, moved ...[]movedJob) []SweptJob {
	status := map[string]kiln.JobStatus{}
	for _, ms := range moved {
		for _, m := range ms {
			status[m.ID] = m.Status
		}
	}
	var out []SweptJob
	for _, c := range cs {
		if s, ok := status[c.ID]; ok {
			out = append(out, SweptJob{JobID: c.ID, RunID: c.RunID, Name: c.Name, AgentID: c.AgentID, Epoch: c.Epoch, Status: s})
		}
	}
	return out
}

// requeueMoves are the three ends of putting a job back in the queue: a
// stopped job is cancelled, a job out of dispatch attempts fails, the rest
// are queued again.
type requeueMoves struct{ stopped, giveUp, requeue move }

var (
	requeueDispatched = requeueMoves{mRequeueStopped, mRequeueGiveUp, mRequeue}
	requeueRecovering = requeueMoves{mCancelRecovering, mRecoverGiveUp, mRecoverRequeue}
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

func (t *txn) requeue(ctx context.Context, rm requeueMoves, ids []string, where string, wargs []any, why string) ([][]movedJob, error) {
	maxAttempts := t.db.cfg.MaxAttempts
	stopped, err := t.move(ctx, rm.stopped, change{ids: ids, where: where + " AND (stop = 1 OR status = 'cancelling')", wargs: wargs,
		err: "cancelled: " + why})
	if err != nil {
		return nil, err
	}
	gaveUp, err := t.move(ctx, rm.giveUp, change{ids: ids, where: where + " AND stop = 0 AND attempts >= ?", wargs: append(append([]any(nil), wargs...), maxAttempts),
		err: fmt.Sprintf("%s; gave up after %d dispatch attempts", why, maxAttempts)})
	if err != nil {
		return nil, err
	}
	set, args := t.requeueSet(why)
	queued, err := t.move(ctx, rm.requeue, change{ids: ids, set: set, args: args, where: where + " AND stop = 0", wargs: wargs})
	if err != nil {
		return nil, err
	}
	return [][]movedJob{stopped, gaveUp, queued}, t.resetSteps(ctx, queued)
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
// it (busy, draining): queued again, or failed once it used MaxAttempts
// dispatches, or cancelled if a stop mark reached it meanwhile.
func (q Queue) Requeue(ctx context.Context, l Lease, why string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		cs, ids, err := t.candidates(ctx, "id = ?", l.JobID)
		if err != nil {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		moved, err := t.requeue(ctx, requeueDispatched, ids, "AND lease_epoch = ?", []any{l.Epoch}, why)
		if err != nil {
			return err
		}
		res.Jobs = swept(cs, moved...)
		if len(res.Jobs) == 0 {
			return t.refusal(ctx, l, "requeue")
		}
		return nil
	})
	res.Effects = eff
	return res, err
}

// SweepAckTimeouts requeues every dispatched job whose ack deadline passed
// (attempts counted, failed past MaxAttempts). The caller closes the
// connections of the returned agents: an agent that does not acknowledge is
// not trusted with more work.
func (q Queue) SweepAckTimeouts(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		now := ms(t.now)
		cs, ids, err := t.candidates(ctx, "status = 'dispatched' AND ack_deadline <= ? ORDER BY ack_deadline LIMIT ?", now, sweepBatch)
		if err != nil || len(cs) == 0 {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		why := fmt.Sprintf("the agent did not acknowledge the job within %s", t.db.cfg.AckTimeout)
		moved, err := t.requeue(ctx, requeueDispatched, ids, "AND ack_deadline <= ?", []any{now}, why)
		res.Jobs = swept(cs, moved...)
		return err
	})
	res.Effects = eff
	return res, err
}

// AgentLost starts the recovery window for every job the agent held:
// dispatched and running jobs become recovering until the window ends or the
// agent reconnects; jobs it was cancelling are cancelled.
func (q Queue) AgentLost(ctx context.Context, agentID string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		cs, ids, err := t.candidates(ctx, inActiveRuns+" AND agent_id = ? AND status IN ("+statusList(held)+")", agentID)
		if err != nil || len(cs) == 0 {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		lost, err := t.move(ctx, mLose, change{ids: ids, set: "recovery_deadline = ?",
			args: []any{ms(t.now.Add(t.db.cfg.RecoveryWindow))}, where: "AND agent_id = ?", wargs: []any{agentID}})
		if err != nil {
			return err
		}
		cancelled, err := t.move(ctx, mLoseCancelling, change{ids: ids, where: "AND agent_id = ?", wargs: []any{agentID},
			err: "the agent was lost while the job was being cancelled"})
		res.Jobs = swept(cs, lost, cancelled)
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
// stop mark reached it. Started jobs keep their window.
func (q Queue) RequeueUnstarted(ctx context.Context, agentID, why string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		where := "AND agent_id = ? AND started_at IS NULL"
		cs, ids, err := t.candidates(ctx, "status = 'recovering' "+where, agentID)
		if err != nil || len(cs) == 0 {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		moved, err := t.requeue(ctx, requeueRecovering, ids, where, []any{agentID}, why)
		res.Jobs = swept(cs, moved...)
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

// Reconnect is an agent coming back with the jobs it still has.
func (q Queue) Reconnect(ctx context.Context, agentID string, inFlight []Lease) (ReconnectResult, error) {
	var res ReconnectResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = ReconnectResult{}
		ids := make([]string, 0, len(inFlight))
		for _, l := range inFlight {
			ids = append(ids, l.JobID)
		}
		orphans, orphanIDs, err := t.candidates(ctx, "agent_id = ? AND status = 'recovering'", agentID)
		if err != nil {
			return err
		}
		if err := t.lockRunsOfJobs(ctx, append(append([]string(nil), ids...), orphanIDs...)); err != nil {
			return err
		}
		for _, l := range inFlight {
			where := "AND agent_id = ? AND lease_epoch = ?"
			for _, m := range []struct {
				mv      move
				started string
			}{{mReclaimRunning, "IS NOT NULL"}, {mReclaimDispatched, "IS NULL"}} {
				if _, err := t.move(ctx, m.mv, change{ids: []string{l.JobID},
					set: "recovery_deadline = NULL, ack_deadline = NULL, last_heartbeat_at = ?", args: []any{ms(t.now)},
					where: where + " AND started_at " + m.started, wargs: []any{agentID, l.Epoch}}); err != nil {
					return err
				}
			}
			var n int
			if err := t.queryRow(ctx, "SELECT COUNT(*) FROM jobs WHERE id = ? AND agent_id = ? AND lease_epoch = ? AND status IN ("+statusList(held)+")",
				l.JobID, agentID, l.Epoch).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				res.Kept = append(res.Kept, l)
			} else {
				res.Refused = append(res.Refused, l)
			}
		}
		listed := map[string]bool{}
		for _, id := range ids {
			listed[id] = true
		}
		var gone []candidate
		var goneIDs []string
		for _, c := range orphans {
			if !listed[c.ID] {
				gone, goneIDs = append(gone, c), append(goneIDs, c.ID)
			}
		}
		if len(gone) == 0 {
			return nil
		}
		moved, err := t.resolveLost(ctx, goneIDs, "AND agent_id = ?", []any{agentID}, "the agent came back without the job")
		res.Resolved = swept(gone, moved...)
		return err
	})
	res.Effects = eff
	return res, err
}

// SweepRecovery ends the recovery window of jobs whose deadline passed: a
// job that had not started is requeued (its attempt counted); a started job
// follows on_agent_lost — retry requeues it once, a second loss or fail ends
// it agent_lost.
func (q Queue) SweepRecovery(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		now := ms(t.now)
		cs, ids, err := t.candidates(ctx, "status = 'recovering' AND recovery_deadline <= ? ORDER BY recovery_deadline LIMIT ?", now, sweepBatch)
		if err != nil || len(cs) == 0 {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		why := fmt.Sprintf("the agent did not come back within the recovery window (%s)", t.db.cfg.RecoveryWindow)
		moved, err := t.resolveLost(ctx, ids, "AND recovery_deadline <= ?", []any{now}, why)
		res.Jobs = swept(cs, moved...)
		return err
	})
	res.Effects = eff
	return res, err
}

// resolveLost ends the recovery of jobs whose agent is gone.
func (t *txn) resolveLost(ctx context.Context, ids []string, where string, wargs []any, why string) ([][]movedJob, error) {
	with := func(extra ...any) []any { return append(append([]any(nil), wargs...), extra...) }
	// Never started: always requeued (or failed past MaxAttempts).
	out, err := t.requeue(ctx, requeueRecovering, ids, where+" AND started_at IS NULL", wargs, why+" before the job started")
	if err != nil {
		return nil, err
	}
	// Started, on_agent_lost: retry, first loss: requeued once.
	set, args := t.requeueSet(why + " while the job ran; retrying once (on_agent_lost: retry)")
	retried, err := t.move(ctx, mRecoverRequeue, change{ids: ids, set: set + ", lost_count = lost_count + 1", args: args,
		where: where + " AND started_at IS NOT NULL AND stop = 0 AND on_agent_lost = 'retry' AND lost_count = 0 AND attempts < ?",
		wargs: with(t.db.cfg.MaxAttempts)})
	if err != nil {
		return nil, err
	}
	if err := t.resetSteps(ctx, retried); err != nil {
		return nil, err
	}
	stopped, err := t.move(ctx, mCancelRecovering, change{ids: ids, where: where + " AND stop = 1", wargs: wargs,
		err: "cancelled: " + why})
	if err != nil {
		return nil, err
	}
	failPolicy, err := t.move(ctx, mRecoverLost, change{ids: ids, where: where + " AND on_agent_lost = 'fail'", wargs: wargs,
		err: why + " while the job ran (on_agent_lost: fail)"})
	if err != nil {
		return nil, err
	}
	again, err := t.move(ctx, mRecoverLost, change{ids: ids, where: where, wargs: wargs,
		err: why + " while the job ran, and it cannot be retried again (its one retry after a lost agent is used)"})
	if err != nil {
		return nil, err
	}
	return append(out, retried, stopped, failPolicy, again), nil
}

// SweepStale ends running (and cancelling) jobs whose agent stopped sending
// job heartbeats for longer than Config.StaleAfter: timed_out_stale. The
// caller disconnects the returned agents.
func (q Queue) SweepStale(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		cutoff := ms(t.now.Add(-t.db.cfg.StaleAfter))
		cs, ids, err := t.candidates(ctx, "status IN ('running', 'cancelling') AND last_heartbeat_at < ? ORDER BY last_heartbeat_at LIMIT ?", cutoff, sweepBatch)
		if err != nil || len(cs) == 0 {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		moved, err := t.move(ctx, mStale, change{ids: ids, where: "AND last_heartbeat_at < ?", wargs: []any{cutoff},
			err: fmt.Sprintf("no heartbeat from the agent for more than %s", t.db.cfg.StaleAfter.Round(time.Second))})
		res.Jobs = swept(cs, moved)
		return err
	})
	res.Effects = eff
	return res, err
}
