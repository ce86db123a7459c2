package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// The end of a job's story: its run rolls up when it was the last one, and
// its steps are settled.

// rollUpRuns ends the runs among runIDs whose jobs have all ended, with
// kiln.RollUp's status. One query finds the runs still open.
func (t *txn) rollUpRuns(ctx context.Context, runIDs []string) error {
	for start := 0; start < len(runIDs); start += 500 {
		chunk := runIDs[start:min(start+500, len(runIDs))]
		open, err := t.ids(ctx, "SELECT DISTINCT run_id FROM jobs WHERE run_id IN ("+marks(len(chunk))+") AND status IN ("+statusList(nonTerminal)+")",
			anys(chunk)...)
		if err != nil {
			return fmt.Errorf("roll up: %w", err)
		}
		for _, id := range chunk {
			if slices.Contains(open, id) {
				continue
			}
			if err := t.rollUp(ctx, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// rollUp ends a run whose jobs have all ended.
func (t *txn) rollUp(ctx context.Context, runID string) error {
	rows, err := t.query(ctx, "SELECT status FROM jobs WHERE run_id = ?", runID)
	if err != nil {
		return fmt.Errorf("roll up: %w", err)
	}
	var statuses []kiln.JobStatus
	for rows.Next() {
		var s kiln.JobStatus
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return err
		}
		statuses = append(statuses, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	status, ok := kiln.RollUp(statuses)
	if !ok {
		return nil
	}
	return t.setRunStatus(ctx, runID, status, []kiln.RunStatus{kiln.RunPending, kiln.RunRunning, kiln.RunCancelling})
}

// setRunStatus moves a run between statuses (compare-and-set) and records
// the change.
func (t *txn) setRunStatus(ctx context.Context, runID string, to kiln.RunStatus, from []kiln.RunStatus) error {
	set := "status = ?, updated_at = ?"
	args := []any{string(to), ms(t.now)}
	switch {
	case to.Terminal():
		set += ", finished_at = ?"
		args = append(args, ms(t.now))
	case to == kiln.RunRunning:
		set += ", started_at = COALESCE(started_at, ?)"
		args = append(args, ms(t.now))
	}
	args = append(args, runID)
	args = append(args, anys(from)...)
	var number int64
	err := t.queryRow(ctx, "UPDATE runs SET "+set+" WHERE id = ? AND status IN ("+marks(len(from))+") RETURNING number", args...).Scan(&number)
	if isNoRows(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("run status: %w", err)
	}
	if t.eff != nil {
		t.eff.Runs = append(t.eff.Runs, RunChange{ID: runID, Number: number, Status: to})
	}
	return nil
}

// reconcileSteps settles the steps of ended jobs as runrules.StepEnds says.
func (t *txn) reconcileSteps(ctx context.Context, ended []runrules.Ended) error {
	byStatus := map[kiln.JobStatus][]string{}
	for _, j := range ended {
		byStatus[j.Status] = append(byStatus[j.Status], j.ID)
	}
	for st, ids := range byStatus {
		running, waiting := runrules.StepEnds(st)
		for start := 0; start < len(ids); start += 500 {
			chunk := ids[start:min(start+500, len(ids))]
			args := []any{string(running), string(waiting), ms(t.now)}
			args = append(args, anys(chunk)...)
			if _, err := t.exec(ctx, `UPDATE steps SET status = CASE WHEN status = 'running' THEN ? ELSE ? END, finished_at = ?
				WHERE job_id IN (`+marks(len(chunk))+`) AND status IN ('pending', 'running')`, args...); err != nil {
				return fmt.Errorf("reconcile steps: %w", err)
			}
		}
	}
	return nil
}
