package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

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
		if j.Reuse != nil && !j.Reuse.Status.Terminal() {
			return nil, invalid("job %q: a reused result must be terminal, not %q", j.Name, j.Reuse.Status)
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
	sort.Strings(keys)
	for _, k := range keys {
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
		status, stepStatus := kiln.JobPending, kiln.StepPending
		var result, outputs, jobErr, finished any
		if r := j.Reuse; r != nil {
			status, stepStatus, ready, reason = r.Status, kiln.StepSkipped, 1, nil
			result, jobErr, finished = string(r.Status.Result()), nullString(r.Error), now
			if len(r.Outputs) > 0 {
				b, err := json.Marshal(r.Outputs)
				if err != nil {
					return fmt.Errorf("outputs: %w", err)
				}
				outputs = string(b)
			}
		}
		jobRows = append(jobRows, []any{id, runID, i, j.Name, j.Base, jsonText(j.Matrix, "{}"), string(status), ready,
			boolInt(hasDependents[j.Base]), j.MaxParallel, boolInt(j.FailFast), string(j.OnAgentLost),
			jsonText(j.Spec, "{}"), j.Requirement.Key(), reason, now, result, outputs, jobErr, finished, now, now})
		for _, e := range j.Needs {
			needRows = append(needRows, []any{id, runID, e.Job, formatResults(e.Accept)})
		}
		for k, s := range j.Steps {
			stepRows = append(stepRows, []any{id, k, s, string(stepStatus)})
		}
	}
	if err := t.insertRows(ctx, "jobs", "id, run_id, idx, name, base, matrix, status, ready, has_dependents, max_parallel, fail_fast, on_agent_lost, spec, queue_key, pending_reason, pending_since, result, outputs, error, finished_at, created_at, updated_at",
		"?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?", jobRows); err != nil {
		return fmt.Errorf("insert jobs: %w", err)
	}
	if err := t.insertRows(ctx, "needs", "job_id, run_id, upstream, accept", "?, ?, ?, ?", needRows); err != nil {
		return fmt.Errorf("insert needs: %w", err)
	}
	if err := t.insertRows(ctx, "steps", "job_id, idx, name, status", "?, ?, ?, ?", stepRows); err != nil {
		return fmt.Errorf("insert steps: %w", err)
	}
	return t.releaseRoots(ctx, runID, jobs, ids)
}

// releaseRoots releases the jobs without needs: max_parallel groups through
// their first wave, the others one by one.
func (t *txn) releaseRoots(ctx context.Context, runID string, jobs []NewJob, ids []string) error {
	waves := runrules.Waves{}
	// A group carried over whole from a rerun (every child reused) has
	// ended already; its dependents are evaluated below.
	reusedBases := map[string]bool{}
	for _, j := range jobs {
		if done, seen := reusedBases[j.Base]; !seen || done {
			reusedBases[j.Base] = j.Reuse != nil
		}
	}
	var roots []pendingJob
	for i, j := range jobs {
		if len(j.Needs) > 0 || j.Reuse != nil {
			continue
		}
		if j.MaxParallel > 0 {
			waves.Add(runrules.Group{RunID: runID, Base: j.Base}, j.MaxParallel)
			continue
		}
		roots = append(roots, pendingJob{ID: ids[i], RunID: runID, Name: j.Name, Base: j.Base,
			Matrix: jsonText(j.Matrix, "{}"), Spec: jsonText(j.Spec, "{}"), Key: j.Requirement.Key()})
	}
	if err := t.releaseAll(ctx, roots, make([][]UpstreamJob, len(roots))); err != nil {
		return err
	}
	for _, base := range sortedKeysBool(reusedBases) {
		if err := t.releaseDependents(ctx, runrules.Group{RunID: runID, Base: base}, waves); err != nil {
			return err
		}
	}
	return t.releaseWaves(ctx, waves)
}

// sortedKeysBool returns the keys whose value is true, sorted.
func sortedKeysBool(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
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
