package store

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// The end of a job's story: its run rolls up when it was the last one, and
// its steps are settled.

// rollUpChunk is the most runs one roll-up check reads; a check of more is
// split, and is never carried by a claim (deferRollUpOf).
const rollUpChunk = 500

// rollUpRuns ends the runs among runIDs whose jobs have all ended, with
// kiln.RollUp's status. One query finds the runs still open. The step
// settles (stepEnds) are run first; on PostgreSQL they ride in that query
// (see stepsWith): every ended job marks its run, so there is always one.
func (t *txn) rollUpRuns(ctx context.Context, runIDs []string, steps []stmt) error {
	if t.deferRollUpOf(runIDs, steps) {
		return nil // carried by the next claim (carriedrollup.go)
	}
	for start := 0; start < len(runIDs); start += rollUpChunk {
		chunk := runIDs[start:min(start+rollUpChunk, len(runIDs))]
		with, withArgs, err := t.stepsWith(ctx, steps)
		if err != nil {
			return err
		}
		steps = nil
		q, args := t.openRuns(chunk)
		open, err := t.ids(ctx, with+q, append(withArgs, args...)...)
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
	return t.execAll(ctx, steps) // left when there was no run to check
}

// openRuns is the query selecting, of runIDs, the runs with a job not
// ended. It asks, per run, whether one exists: the first such job answers,
// where reading every open job of a 256-job run through jobs_run (on
// PostgreSQL with a heap fetch each while the rows are fresh) took up to
// 21 ms in the fleet's committer (auto_explain in kiln bench).
func (t *txn) openRuns(runIDs []string) (string, []any) {
	if t.db.dialect.writesInWith() {
		from, args := t.openRunsFrom(runIDs)
		return "SELECT r " + from, args
	}
	return "SELECT r.value FROM json_each(?) AS r WHERE EXISTS (SELECT 1 FROM jobs WHERE run_id = r.value AND " + openJob + ")",
		[]any{jsonStrings(runIDs)}
}

// openRunsFrom is openRuns's FROM and WHERE on PostgreSQL (the run id is
// column r), for a claim statement that carries the check.
func (t *txn) openRunsFrom(runIDs []string) (string, []any) {
	return "FROM unnest(?::text[]) AS r WHERE EXISTS (SELECT 1 FROM jobs WHERE run_id = r AND " + openJob + ")", []any{runIDs}
}

// openJob is the condition of a job not ended.
var openJob = "status IN (" + statusList(nonTerminal) + ")"

// stepsWith runs the step settles, or, on PostgreSQL, returns them as the
// WITH clause of the statement that follows: one round trip less for every
// transaction that ends jobs (the fleet's committer runs one per batch).
// The roll-up check reads jobs, never steps, so it does not matter that it
// cannot see their changes.
func (t *txn) stepsWith(ctx context.Context, steps []stmt) (string, []any, error) {
	if len(steps) == 0 {
		return "", nil, nil
	}
	if !t.db.dialect.writesInWith() {
		return "", nil, t.execAll(ctx, steps)
	}
	items, args := withItems(steps)
	return "WITH " + strings.TrimSuffix(items, ", ") + " ", args, nil
}

// withItems renders data-modifying statements as WITH items named s0, s1
// …, each followed by ", ", with their arguments in order.
func withItems(steps []stmt) (string, []any) {
	var b strings.Builder
	var args []any
	for i, st := range steps {
		fmt.Fprintf(&b, "s%d AS (%s), ", i, st.sql)
		args = append(args, st.args...)
	}
	return b.String(), args
}

// stmt is a statement and its arguments.
type stmt struct {
	sql  string
	args []any
}

func (t *txn) execAll(ctx context.Context, sts []stmt) error {
	for _, st := range sts {
		if _, err := t.exec(ctx, st.sql, st.args...); err != nil {
			return fmt.Errorf("reconcile steps: %w", err)
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

// stepEnds are the statements settling the steps of ended jobs as
// runrules.StepEnds says.
func (t *txn) stepEnds(ended []runrules.Ended) []stmt {
	byStatus := map[kiln.JobStatus][]string{}
	var order []kiln.JobStatus
	for _, j := range ended {
		if _, ok := byStatus[j.Status]; !ok {
			order = append(order, j.Status)
		}
		byStatus[j.Status] = append(byStatus[j.Status], j.ID)
	}
	var out []stmt
	for _, st := range order {
		ids := byStatus[st]
		running, waiting := runrules.StepEnds(st)
		for start := 0; start < len(ids); start += 500 {
			in, args := t.db.dialect.oneOf("job_id", ids[start:min(start+500, len(ids))])
			out = append(out, stmt{sql: `UPDATE steps SET status = CASE WHEN status = 'running' THEN ? ELSE ? END, finished_at = ?
				WHERE ` + in + ` AND status IN ('pending', 'running')`,
				args: append([]any{string(running), string(waiting), ms(t.now)}, args...)})
		}
	}
	return out
}
