package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/kilnci/kiln"
)

// Runs creates, reads and cancels runs.
type Runs struct{ h handle }

// Create stores a run with all its jobs, steps and needs edges, and releases
// its root jobs (through the Releaser) in the same transaction: the run is
// either fully there, with its first jobs queued, or not at all.
func (r Runs) Create(ctx context.Context, nr NewRun) (CreatedRun, error) {
	jobs, err := validateRun(nr)
	if err != nil {
		return CreatedRun{}, err
	}
	var out CreatedRun
	eff, err := r.h.op(ctx, func(t *txn) error {
		out = CreatedRun{Jobs: map[string]string{}}
		return t.createRun(ctx, nr, jobs, &out)
	})
	out.Effects = eff
	return out, err
}

func newID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("new id: %w", err)
	}
	return id.String(), nil
}

// validateRun checks what the store relies on (the workflow package has
// validated the rest) and returns the jobs with defaults applied.
func validateRun(nr NewRun) ([]NewJob, error) {
	if strings.TrimSpace(nr.Workflow) == "" {
		return nil, invalid("a run needs a workflow name")
	}
	jobs := make([]NewJob, len(nr.Jobs))
	names := map[string]bool{}
	bases := map[string]bool{}
	for i, j := range nr.Jobs {
		if j.Name == "" {
			return nil, invalid("job %d of the run has no name", i+1)
		}
		if names[j.Name] {
			return nil, invalid("two jobs of the run are named %q", j.Name)
		}
		names[j.Name] = true
		if j.Base == "" {
			j.Base = j.Name
		}
		if j.OnAgentLost == "" {
			j.OnAgentLost = AgentLostRetry
		}
		if j.OnAgentLost != AgentLostRetry && j.OnAgentLost != AgentLostFail {
			return nil, invalid("job %q: on_agent_lost %q is not retry or fail", j.Name, j.OnAgentLost)
		}
		if j.MaxParallel < 0 {
			return nil, invalid("job %q: max_parallel %d is negative", j.Name, j.MaxParallel)
		}
		bases[j.Base] = true
		jobs[i] = j
	}
	graph := map[string][]string{}
	for i, j := range jobs {
		needs := make([]NeedEdge, len(j.Needs))
		seen := map[string]bool{}
		for k, e := range j.Needs {
			if !bases[e.Job] {
				return nil, invalid("job %q needs %q, which is not a job of the run", j.Name, e.Job)
			}
			if e.Job == j.Base {
				return nil, invalid("job %q needs itself", j.Name)
			}
			if seen[e.Job] {
				return nil, invalid("job %q needs %q twice", j.Name, e.Job)
			}
			seen[e.Job] = true
			if len(e.Accept) == 0 {
				e.Accept = []kiln.Result{kiln.ResultSuccess}
			}
			for _, res := range e.Accept {
				if !res.Valid() {
					return nil, invalid("job %q: %q is not a result (success, failure, cancelled, skipped)", j.Name, res)
				}
			}
			needs[k] = e
			graph[j.Base] = append(graph[j.Base], e.Job)
		}
		jobs[i].Needs = needs
	}
	if cyc := findCycle(graph); cyc != "" {
		return nil, invalid("the needs of the run form a cycle: %s", cyc)
	}
	return jobs, nil
}

// findCycle returns "a → b → a" for a cycle in the base graph, or "".
func findCycle(graph map[string][]string) string {
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(n string) string
	visit = func(n string) string {
		color[n] = grey
		stack = append(stack, n)
		for _, m := range graph[n] {
			switch color[m] {
			case grey:
				i := len(stack) - 1
				for stack[i] != m {
					i--
				}
				return strings.Join(append(append([]string(nil), stack[i:]...), m), " → ")
			case white:
				if c := visit(m); c != "" {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return ""
	}
	keys := make([]string, 0, len(graph))
	for k := range graph {
		keys = append(keys, k)
	}
	for _, k := range sortedStrings(keys) {
		if color[k] == white {
			if c := visit(k); c != "" {
				return c
			}
		}
	}
	return ""
}

func (t *txn) createRun(ctx context.Context, nr NewRun, jobs []NewJob, out *CreatedRun) error {
	runID, err := newID()
	if err != nil {
		return err
	}
	now := ms(t.now)
	if len(nr.WorkflowContent) > 0 && nr.WorkflowHash != "" {
		if _, err := t.exec(ctx, "INSERT INTO workflow_definitions (hash, content, created_at) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING",
			nr.WorkflowHash, string(nr.WorkflowContent), now); err != nil {
			return fmt.Errorf("store workflow definition: %w", err)
		}
	}
	var deadline any
	if nr.Timeout > 0 {
		deadline = ms(t.now.Add(nr.Timeout))
	}
	var deliveryID any
	if nr.DeliveryID != 0 {
		deliveryID = nr.DeliveryID
	}
	err = t.queryRow(ctx, `INSERT INTO runs (id, number, source, repository, workflow, workflow_file, workflow_hash,
		event, inputs, trace, ref, sha, status, deadline, parent_run_id, rerun_of, delivery_id, created_at, updated_at)
		VALUES (?, `+t.db.dialect.nextRunNumber()+`, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?) RETURNING number`,
		runID, nr.Source, nr.Repository, nr.Workflow, nr.WorkflowFile, nr.WorkflowHash,
		jsonText(nr.Event, "{}"), jsonText(nr.Inputs, "{}"), jsonText(nr.Trace, "[]"), nr.Ref, nr.SHA,
		deadline, nullString(nr.ParentRunID), nullString(nr.RerunOf), deliveryID, now, now).Scan(&out.Number)
	if err != nil {
		return fmt.Errorf("insert run: %w", err)
	}
	out.ID = runID
	t.locked[runID] = true // a row no one else can see yet
	t.markDirty(runID)     // a run without jobs (or all skipped) ends at once

	hasDependents := map[string]bool{}
	for _, j := range jobs {
		for _, e := range j.Needs {
			hasDependents[e.Job] = true
		}
	}
	var jobRows, needRows, stepRows [][]any
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		id, err := newID()
		if err != nil {
			return err
		}
		ids[i] = id
		out.Jobs[j.Name] = id
		ready := 0
		var reason any
		if len(j.Needs) == 0 {
			ready = 1
		} else {
			bs := make([]string, len(j.Needs))
			for k, e := range j.Needs {
				bs[k] = e.Job
			}
			reason = "waiting for needs: " + strings.Join(bs, ", ")
		}
		jobRows = append(jobRows, []any{id, runID, i, j.Name, j.Base, jsonText(j.Matrix, "{}"), ready,
			boolInt(hasDependents[j.Base]), j.MaxParallel, boolInt(j.FailFast), string(j.OnAgentLost),
			jsonText(j.Spec, "{}"), j.Requirement.Key(), reason, now, now, now})
		for _, e := range j.Needs {
			needRows = append(needRows, []any{id, runID, e.Job, formatResults(e.Accept)})
		}
		for k, s := range j.Steps {
			stepRows = append(stepRows, []any{id, k, s})
		}
	}
	if err := t.insertRows(ctx, "jobs", "id, run_id, idx, name, base, matrix, status, ready, has_dependents, max_parallel, fail_fast, on_agent_lost, spec, queue_key, pending_reason, pending_since, created_at, updated_at",
		"?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?", jobRows); err != nil {
		return fmt.Errorf("insert jobs: %w", err)
	}
	if err := t.insertRows(ctx, "needs", "job_id, run_id, upstream, accept", "?, ?, ?, ?", needRows); err != nil {
		return fmt.Errorf("insert needs: %w", err)
	}
	if err := t.insertRows(ctx, "steps", "job_id, idx, name, status", "?, ?, ?, 'pending'", stepRows); err != nil {
		return fmt.Errorf("insert steps: %w", err)
	}
	return t.releaseRoots(ctx, runID, jobs, ids)
}

// releaseRoots releases the jobs without needs: max_parallel groups through
// their first wave, the others one by one.
func (t *txn) releaseRoots(ctx context.Context, runID string, jobs []NewJob, ids []string) error {
	waves := map[runBase]int{}
	var roots []pendingJob
	for i, j := range jobs {
		if len(j.Needs) > 0 {
			continue
		}
		if j.MaxParallel > 0 {
			waves[runBase{runID, j.Base}] = j.MaxParallel
			continue
		}
		roots = append(roots, pendingJob{ID: ids[i], RunID: runID, Name: j.Name, Base: j.Base,
			Matrix: jsonText(j.Matrix, "{}"), Spec: jsonText(j.Spec, "{}"), Key: j.Requirement.Key()})
	}
	if err := t.releaseAll(ctx, roots, make([][]UpstreamJob, len(roots))); err != nil {
		return err
	}
	return t.releaseWaves(ctx, waves)
}

// insertRows inserts rows with multi-row INSERTs, chunked below both
// databases' parameter limits.
func (t *txn) insertRows(ctx context.Context, table, cols, placeholders string, rows [][]any) error {
	if len(rows) == 0 {
		return nil
	}
	per := max(1, 30000/len(rows[0]))
	for start := 0; start < len(rows); start += per {
		chunk := rows[start:min(start+per, len(rows))]
		var b strings.Builder
		fmt.Fprintf(&b, "INSERT INTO %s (%s) VALUES ", table, cols)
		args := make([]any, 0, len(chunk)*len(chunk[0]))
		for i, r := range chunk {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(" + placeholders + ")")
			args = append(args, r...)
		}
		if _, err := t.exec(ctx, b.String(), args...); err != nil {
			return err
		}
	}
	return nil
}

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
// queued again); waiting and recovering jobs are cancelled at once, jobs on
// agents move to cancelling and are returned so the caller sends cancels.
// force also ends the cancelling ones (the agents did not answer). The run is
// cancelling until its last job ends. Cancelling a finished run is a conflict.
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
		if _, err := t.exec(ctx, "UPDATE runs SET cancel_reason = COALESCE(cancel_reason, ?), updated_at = ? WHERE id = ?", reason, ms(t.now), runID); err != nil {
			return err
		}
		if err := t.setRunStatus(ctx, runID, kiln.RunCancelling, []kiln.RunStatus{kiln.RunPending, kiln.RunRunning}); err != nil {
			return err
		}
		ids, err := t.ids(ctx, "SELECT id FROM jobs WHERE run_id = ? AND status IN ("+statusList(nonTerminal)+")", runID)
		if err != nil || len(ids) == 0 {
			return err
		}
		if _, err := t.exec(ctx, "UPDATE jobs SET stop = 1 WHERE run_id = ? AND status IN ("+statusList(nonTerminal)+")", runID); err != nil {
			return err
		}
		moves := []move{mCancelWaiting, mCancelRecovering, mCancelAsk}
		if force {
			moves = append(moves, mCancelForce)
		}
		for _, m := range moves {
			moved, err := t.move(ctx, m, change{ids: ids, err: reason})
			if err != nil {
				return err
			}
			for _, j := range moved {
				if j.Status == kiln.JobCancelling {
					res.Cancelling = append(res.Cancelling, CancelTarget{JobID: j.ID, RunID: j.RunID, Name: j.Name, AgentID: j.AgentID, Epoch: j.Epoch})
				}
			}
		}
		return nil
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
	return r.list(ctx, "deadline IS NOT NULL AND status IN ('pending', 'running', 'cancelling') AND deadline < ? ORDER BY deadline LIMIT ?",
		ms(r.h.now()), limit)
}

// Get returns a run by id with its jobs and their steps.
func (r Runs) Get(ctx context.Context, id string) (Run, error) {
	return r.get(ctx, "id = ?", id)
}

// GetByNumber returns a run by its number with its jobs and their steps.
func (r Runs) GetByNumber(ctx context.Context, number int64) (Run, error) {
	return r.get(ctx, "number = ?", number)
}

func (r Runs) get(ctx context.Context, where string, arg any) (Run, error) {
	runs, err := r.list(ctx, where, arg)
	if err != nil {
		return Run{}, err
	}
	if len(runs) == 0 {
		return Run{}, notFound("run %v does not exist", arg)
	}
	run := runs[0]
	run.Jobs, err = loadJobs(ctx, r.h.reader(), "run_id = ? ORDER BY idx", run.ID)
	return run, err
}

// RunFilter selects runs for List. Zero fields do not filter.
type RunFilter struct {
	Status     kiln.RunStatus
	Workflow   string
	Repository string
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
	COALESCE(rerun_of, ''), COALESCE(delivery_id, 0), created_at, started_at, finished_at`

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
		if err := rows.Scan(&run.ID, &run.Number, &run.Source, &run.Repository, &run.Workflow, &run.WorkflowFile,
			&run.WorkflowHash, &event, &inputs, &trace, &run.Ref, &run.SHA, &run.Status, &run.CancelReason,
			&run.FailureReason, &deadline, &run.ParentRunID, &run.RerunOf, &run.DeliveryID, &created, &started, &finished); err != nil {
			return nil, err
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
