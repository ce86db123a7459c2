package store

import (
	"context"
	"fmt"
	"sort"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// How the sweeps, requeues and agent losses of recovery.go meet the
// recovery rules: load each candidate job with what runrules.Held reads,
// let the rule decide, then apply the outcomes as compare-and-set moves.

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
	now, err := t.candidatesByID(ctx, ids)
	if err != nil {
		return nil, err
	}
	for i, c := range cs {
		if n, ok := now[c.ID]; ok {
			cs[i] = n
		}
	}
	return cs, nil
}

// candidatesByID reads jobs by id, as they are now.
func (t *txn) candidatesByID(ctx context.Context, ids []string) (map[string]candidate, error) {
	out := make(map[string]candidate, len(ids))
	for start := 0; start < len(ids); start += 500 {
		chunk := ids[start:min(start+500, len(ids))]
		got, _, err := t.candidates(ctx, "id IN ("+marks(len(chunk))+")", anys(chunk)...)
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			out[c.ID] = c
		}
	}
	return out, nil
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
			typ := EventRequeued
			if k.v == runrules.Retry {
				typ = EventRetried
			}
			for _, j := range moved {
				t.event(j.RunID, j.ID, typ, "back in the queue: "+k.reason)
			}
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
