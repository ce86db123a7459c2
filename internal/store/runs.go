package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// Runs creates, reads and cancels runs.
type Runs struct{ h handle }

// CancelResult is what Cancel did.
type CancelResult struct {
	// Cancelled are jobs that ended at once (they were waiting, recovering,
	// or a forced cancel ended them).
	Cancelled []JobRef
	// Cancelling are jobs on agents that must be sent a cancel; a later
	// forced Cancel ends them if the agents do not answer.
	Cancelling []CancelTarget
	Effects
}

// Cancel cancels a run: every unfinished job gets a stop mark (it is never
// queued again) and runrules.StopFor decides the rest: waiting and
// recovering jobs are cancelled at once, jobs on agents move to cancelling
// and are returned so the caller sends cancels. force (a second request:
// the agents did not answer) also ends every job on an agent at once
// (runrules.Forced). The run is cancelling until its last job ends.
// Cancelling a finished run is a conflict.
func (r Runs) Cancel(ctx context.Context, runID, reason string, force bool) (CancelResult, error) {
	if reason == "" {
		reason = "cancelled"
	}
	var res CancelResult
	eff, err := r.h.op(ctx, func(t *txn) error {
		res = CancelResult{}
		if err := t.lockRuns(ctx, []string{runID}); err != nil {
			return err
		}
		var status kiln.RunStatus
		err := t.queryRow(ctx, "SELECT status FROM runs WHERE id = ?", runID).Scan(&status)
		if isNoRows(err) {
			return notFound("run %s does not exist", runID)
		}
		if err != nil {
			return err
		}
		if status.Terminal() {
			return conflict("run %s already finished (%s)", runID, status)
		}
		// The first request's time is kept: the engine forces the cancel a
		// grace after it (CancelsOverdue), whichever server asked.
		if _, err := t.exec(ctx, "UPDATE runs SET cancel_reason = COALESCE(cancel_reason, ?), cancel_requested_at = COALESCE(cancel_requested_at, ?), updated_at = ? WHERE id = ?",
			reason, ms(t.now), ms(t.now), runID); err != nil {
			return err
		}
		if err := t.setRunStatus(ctx, runID, kiln.RunCancelling, []kiln.RunStatus{kiln.RunPending, kiln.RunRunning}); err != nil {
			return err
		}
		jobs, err := t.stopMark(ctx, "run_id = ?", runID)
		if err != nil {
			return err
		}
		moved, err := t.stop(ctx, jobs, reason)
		if err != nil {
			return err
		}
		for _, j := range moved {
			if j.Status == kiln.JobCancelling {
				res.Cancelling = append(res.Cancelling, CancelTarget{JobID: j.ID, RunID: j.RunID, Name: j.Name, AgentID: j.AgentID, Epoch: j.Epoch})
			}
		}
		var forced []string
		for _, j := range jobs {
			if force && runrules.Forced(j.status) {
				forced = append(forced, j.id)
			}
		}
		if len(forced) > 0 {
			_, err = t.move(ctx, mCancelForce, change{ids: forced, err: reason})
		}
		return err
	})
	for _, j := range eff.Finished {
		if j.RunID == runID && j.Status == kiln.JobCancelled {
			res.Cancelled = append(res.Cancelled, j)
		}
	}
	// Jobs moved to cancelling and then force-cancelled are not pending a cancel.
	if force {
		res.Cancelling = nil
	}
	res.Effects = eff
	return res, err
}

// Overdue lists unfinished runs past their deadline (the workflow timeout);
// the engine cancels them with the reason "workflow timeout".
func (r Runs) Overdue(ctx context.Context, limit int) ([]Run, error) {
	if limit <= 0 {
		limit = 100
	}
	// A run held for approval has no deadline yet: Approve sets it.
	return r.list(ctx, "deadline IS NOT NULL AND status IN ('pending', 'running', 'cancelling') AND deadline < ?"+
		" AND (approval_reason IS NULL OR approved_at IS NOT NULL) ORDER BY deadline LIMIT ?",
		ms(r.h.now()), limit)
}

// CancelsOverdue lists the ids of runs still cancelling a grace or more
// after their cancel was requested: their agents did not confirm in time,
// and the engine forces the cancel. The request time is in the database, so
// a restart or another server forces it on time.
func (r Runs) CancelsOverdue(ctx context.Context, grace time.Duration, limit int) ([]string, error) {
	if limit <= 0 {
		limit = 100
	}
	return queryStrings(ctx, r.h.reader(), "SELECT id FROM runs WHERE status = 'cancelling' AND cancel_requested_at <= ? ORDER BY cancel_requested_at LIMIT ?",
		ms(r.h.now().Add(-grace)), limit)
}

// Get returns a run by id with its jobs and their steps.
func (r Runs) Get(ctx context.Context, id string) (Run, error) {
	return r.get(ctx, "id = ?", id)
}

// Header returns a run by id without its jobs: one row, for callers that
// need only the run's own fields (a commit status per run change).
func (r Runs) Header(ctx context.Context, id string) (Run, error) {
	return r.header(ctx, "id = ?", id)
}

// StepCounts counts the steps of a run's jobs by status, in one grouped
// query: what the metrics need of a finished run, without reading every
// job and step of it.
//
// Where it can (PostgreSQL), it reads each job's steps through their
// primary key (LATERAL, OFFSET 0 keeping the subquery apart): joined as
// two sets, the planner hashed the run's jobs and scanned the whole steps
// table while its statistics said the table was small — 2–3 ms at 6,000
// steps in kiln bench (a new database), at every finished run, and growing
// with the table until the next ANALYZE. SQLite's planner probes the key
// for each job already.
func (r Runs) StepCounts(ctx context.Context, id string) (map[kiln.StepStatus]int, error) {
	q := `SELECT s.status, COUNT(*) FROM steps s JOIN jobs j ON j.id = s.job_id WHERE j.run_id = ? GROUP BY s.status`
	if r.h.db.dialect.lateral() {
		q = `SELECT s.status, COUNT(*) FROM jobs j CROSS JOIN LATERAL (SELECT status FROM steps WHERE job_id = j.id OFFSET 0) s
			WHERE j.run_id = ? GROUP BY s.status`
	}
	rows, err := r.h.reader().query(ctx, q, id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[kiln.StepStatus]int{}
	for rows.Next() {
		var st kiln.StepStatus
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

// GetByNumber returns a run by its number with its jobs and their steps.
func (r Runs) GetByNumber(ctx context.Context, number int64) (Run, error) {
	return r.get(ctx, "number = ?", number)
}

func (r Runs) get(ctx context.Context, where string, arg any) (Run, error) {
	run, err := r.header(ctx, where, arg)
	if err != nil {
		return Run{}, err
	}
	run.Jobs, err = loadJobs(ctx, r.h.reader(), "run_id = ? ORDER BY idx", run.ID)
	return run, err
}

// header reads the one run where selects, without its jobs.
func (r Runs) header(ctx context.Context, where string, arg any) (Run, error) {
	runs, err := r.list(ctx, where, arg)
	if err != nil {
		return Run{}, err
	}
	if len(runs) == 0 {
		return Run{}, notFound("run %v does not exist", arg)
	}
	return runs[0], nil
}

// RunFilter selects runs for List. Zero fields do not filter.
type RunFilter struct {
	Status     kiln.RunStatus
	Workflow   string
	Repository string
	Source     string // the source's id
	Ref        string // the full ref (refs/heads/main)
	Event      kiln.EventName
	// Before pages backwards: only runs with a smaller number.
	Before int64
	Limit  int // default 50, at most 1000
}

// List returns runs newest first (without jobs).
func (r Runs) List(ctx context.Context, f RunFilter) ([]Run, error) {
	var conds []string
	var args []any
	if f.Status != "" {
		conds, args = append(conds, "status = ?"), append(args, string(f.Status))
	}
	if f.Workflow != "" {
		conds, args = append(conds, "workflow = ?"), append(args, f.Workflow)
	}
	if f.Repository != "" {
		conds, args = append(conds, "repository = ?"), append(args, f.Repository)
	}
	if f.Source != "" {
		conds, args = append(conds, "source = ?"), append(args, f.Source)
	}
	if f.Ref != "" {
		conds, args = append(conds, "ref = ?"), append(args, f.Ref)
	}
	if f.Event != "" {
		// The event's name lives in its JSON; both dialects read it.
		expr := "json_extract(event, '$.name')"
		if r.h.db.dialect.name() == "postgres" {
			expr = "(event::json->>'name')"
		}
		conds, args = append(conds, expr+" = ?"), append(args, string(f.Event))
	}
	if f.Before > 0 {
		conds, args = append(conds, "number < ?"), append(args, f.Before)
	}
	if f.Limit <= 0 {
		f.Limit = 50
	}
	f.Limit = min(f.Limit, 1000)
	where := "1 = 1"
	if len(conds) > 0 {
		where = strings.Join(conds, " AND ")
	}
	return r.list(ctx, where+" ORDER BY number DESC LIMIT ?", append(args, f.Limit)...)
}

// SetReportNote records why the run's report to its forge fell back (a
// check run GitHub refused, posted as a commit status instead). Not a
// state transition: the latest note wins, whatever the run's status.
func (r Runs) SetReportNote(ctx context.Context, id, note string) error {
	return r.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "UPDATE runs SET report_note = ? WHERE id = ? AND report_note <> ?", note, id, note)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var one int
			if err := t.queryRow(ctx, "SELECT 1 FROM runs WHERE id = ?", id).Scan(&one); isNoRows(err) {
				return notFound("run %s does not exist", id)
			}
		}
		return nil
	})
}

// WorkflowDefinition returns the workflow file content stored under hash.
func (r Runs) WorkflowDefinition(ctx context.Context, hash string) ([]byte, error) {
	var content string
	err := r.h.reader().queryRow(ctx, "SELECT content FROM workflow_definitions WHERE hash = ?", hash).Scan(&content)
	if isNoRows(err) {
		return nil, notFound("no workflow definition with hash %s", hash)
	}
	return []byte(content), err
}

const runCols = `id, number, source, repository, workflow, workflow_file, workflow_hash, event, inputs, trace, ref, sha,
	status, COALESCE(cancel_reason, ''), COALESCE(failure_reason, ''), deadline, COALESCE(parent_run_id, ''),
	COALESCE(rerun_of, ''), COALESCE(delivery_id, 0), created_at, started_at, finished_at` + runApprovalCols + `, report_note`

const runApprovalCols = `, approval_reason, COALESCE(approved_by, ''), approved_at`

func (r Runs) list(ctx context.Context, where string, args ...any) ([]Run, error) {
	rows, err := r.h.reader().query(ctx, "SELECT "+runCols+" FROM runs WHERE "+where, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		var run Run
		var event, inputs, trace string
		var deadline, created, started, finished sql.NullInt64
		var held sql.NullString
		var approval Approval
		var approvedAt sql.NullInt64
		if err := rows.Scan(&run.ID, &run.Number, &run.Source, &run.Repository, &run.Workflow, &run.WorkflowFile,
			&run.WorkflowHash, &event, &inputs, &trace, &run.Ref, &run.SHA, &run.Status, &run.CancelReason,
			&run.FailureReason, &deadline, &run.ParentRunID, &run.RerunOf, &run.DeliveryID, &created, &started, &finished,
			&held, &approval.ApprovedBy, &approvedAt, &run.ReportNote); err != nil {
			return nil, err
		}
		if held.Valid {
			approval.Reason, approval.ApprovedAt = held.String, fromMS(approvedAt)
			run.Approval = &approval
		}
		run.Event, run.Inputs, run.Trace = json.RawMessage(event), json.RawMessage(inputs), json.RawMessage(trace)
		run.Deadline, run.CreatedAt, run.StartedAt, run.FinishedAt = fromMS(deadline), fromMS(created), fromMS(started), fromMS(finished)
		out = append(out, run)
	}
	return out, rows.Err()
}

func jsonText(v json.RawMessage, empty string) string {
	if len(v) == 0 {
		return empty
	}
	return string(v)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func isNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }
