package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
		if j.Reuse != nil && nr.Hold != "" {
			return nil, invalid("job %q: a run held for approval carries over no results", j.Name)
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
	// The workflow's text is stored once per content hash; on PostgreSQL
	// in the statement inserting the run (a WITH clause, no round trip of
	// its own).
	var with string
	var withArgs []any
	if len(nr.WorkflowContent) > 0 && nr.WorkflowHash != "" {
		const def = "INSERT INTO workflow_definitions (hash, content, created_at) VALUES (?, ?, ?) ON CONFLICT (hash) DO NOTHING"
		args := []any{nr.WorkflowHash, string(nr.WorkflowContent), now}
		if t.db.dialect.writesInWith() {
			with, withArgs = "WITH wd AS ("+def+") ", args
		} else if _, err := t.exec(ctx, def, args...); err != nil {
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
	err = t.queryRow(ctx, with+`INSERT INTO runs (id, number, source, repository, workflow, workflow_file, workflow_hash,
		event, inputs, trace, ref, sha, status, deadline, parent_run_id, rerun_of, delivery_id, created_at, updated_at,
		approval_reason)
		VALUES (?, `+t.db.dialect.nextRunNumber()+`, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?) RETURNING number`,
		append(withArgs, runID, nr.Source, nr.Repository, nr.Workflow, nr.WorkflowFile, nr.WorkflowHash,
			jsonText(nr.Event, "{}"), jsonText(nr.Inputs, "{}"), jsonText(nr.Trace, "[]"), nr.Ref, nr.SHA,
			deadline, nullString(nr.ParentRunID), nullString(nr.RerunOf), deliveryID, now, now,
			nullString(nr.Hold))...).Scan(&out.Number)
	if err != nil {
		return fmt.Errorf("insert run: %w", err)
	}
	out.ID = runID
	t.locked[runID] = true // a row no one else can see yet
	if nr.RerunOf != "" {
		if err := t.recordRerun(ctx, nr.RerunOf, runID, out.Number, jobs); err != nil {
			return err
		}
	}

	hasDependents := map[string]bool{}
	for _, j := range jobs {
		for _, e := range j.Needs {
			hasDependents[e.Job] = true
		}
	}
	var jobRows, specRows, needRows, stepRows [][]any
	open := false // a job is written pending or queued: the run goes on
	var released []movedJob
	for i, j := range jobs {
		id, err := newID()
		if err != nil {
			return err
		}
		out.Jobs[j.Name] = id
		r := jobRow{status: kiln.JobPending, steps: kiln.StepPending, spec: jsonText(j.Spec, "{}"), key: j.Requirement.Key(), since: now}
		switch {
		case j.Reuse != nil:
			if err := r.reuse(j.Reuse, now); err != nil {
				return err
			}
		case nr.Hold != "":
			r.reason = nr.Hold // nothing is released before Approve
		case len(j.Needs) > 0:
			bs := make([]string, len(j.Needs))
			for k, e := range j.Needs {
				bs[k] = e.Job
			}
			r.reason = "waiting for needs: " + strings.Join(bs, ", ")
		case j.MaxParallel > 0:
			r.ready = 1 // released with its group's first wave, below
		default:
			// A root job is released before its row is written, so it is
			// written once, already queued (or ended).
			r.ready = 1
			r.release(t, t.db.cfg.Releaser(ReadyJob{
				ID: id, RunID: runID, RunNumber: out.Number, Name: j.Name, Base: j.Base,
				Matrix: json.RawMessage(jsonText(j.Matrix, "{}")), Spec: json.RawMessage(r.spec),
				Requirement: kiln.ParseRequirementKey(r.key),
			}))
			released = append(released, movedJob{ID: id, RunID: runID, Name: j.Name, Base: j.Base, FailFast: j.FailFast,
				HasDependents: hasDependents[j.Base], Status: r.status})
			if r.status == kiln.JobQueued {
				t.event(runID, id, EventReleased, "queued for "+describeKey(r.key))
				if !slices.Contains(t.queuedKeys, r.key) {
					t.queuedKeys = append(t.queuedKeys, r.key)
				}
			}
		}
		if j.Reuse != nil {
			t.event(runID, id, EventReused, fmt.Sprintf("%s in the run this one reruns: not run again", j.Reuse.Status))
		}
		open = open || !r.status.Terminal()
		jobRows = append(jobRows, []any{id, runID, i, j.Name, j.Base, jsonText(j.Matrix, "{}"), string(r.status), r.ready,
			boolInt(hasDependents[j.Base]), j.MaxParallel, boolInt(j.FailFast), string(j.OnAgentLost),
			r.key, r.reason, r.since, r.queuedAt, r.expiresAt, r.result, r.outputs, r.err, r.finished, now, now})
		specRows = append(specRows, []any{id, r.spec})
		for _, e := range j.Needs {
			needRows = append(needRows, []any{id, runID, e.Job, formatResults(e.Accept)})
		}
		for k, s := range j.Steps {
			stepRows = append(stepRows, []any{id, k, s, string(r.steps)})
		}
	}
	if err := t.insertRows(ctx, tableRows{jobsTable, jobRows}, tableRows{jobSpecsTable, specRows},
		tableRows{needsTable, needRows}, tableRows{stepsTable, stepRows}); err != nil {
		return fmt.Errorf("insert jobs: %w", err)
	}
	if !open {
		// A run without jobs, or whose jobs all ended already (skipped,
		// carried over), ends at once. One with a job to run cannot: no
		// roll-up check (a statement, a round trip) for it.
		t.markDirty(runID)
	}
	for _, j := range released {
		t.moved(j)
	}
	if nr.Hold != "" {
		return nil
	}
	return t.releaseRest(ctx, runID, jobs)
}

// recordRerun puts a rerun on both runs' timelines.
func (t *txn) recordRerun(ctx context.Context, origID, runID string, number int64, jobs []NewJob) error {
	var orig int64
	err := t.queryRow(ctx, "SELECT number FROM runs WHERE id = ?", origID).Scan(&orig)
	if isNoRows(err) {
		return nil // the run it reruns is gone (retention): nothing to say on it
	}
	if err != nil {
		return fmt.Errorf("rerun of %s: %w", origID, err)
	}
	what := "all jobs"
	reused := 0
	for _, j := range jobs {
		if j.Reuse != nil {
			reused++
		}
	}
	if reused > 0 {
		what = fmt.Sprintf("failed jobs only: %d of %d carried over", reused, len(jobs))
	}
	t.event(runID, "", EventRerun, fmt.Sprintf("rerun of run #%d (%s)", orig, what))
	t.event(origID, "", EventRerun, fmt.Sprintf("rerun as run #%d (%s)", number, what))
	return nil
}

// jobRow is the state a job of a new run is written with.
type jobRow struct {
	status               kiln.JobStatus
	steps                kiln.StepStatus
	ready                int
	spec, key            string
	reason, since        any
	queuedAt, expiresAt  any
	result, outputs, err any
	finished             any
}

// reuse writes a result carried over from the run being rerun.
func (r *jobRow) reuse(u *Reused, now int64) error {
	r.status, r.steps, r.ready, r.reason = u.Status, kiln.StepSkipped, 1, nil
	r.result, r.err, r.finished = string(u.Status.Result()), nullString(u.Error), now
	if len(u.Outputs) > 0 {
		b, err := json.Marshal(u.Outputs)
		if err != nil {
			return fmt.Errorf("outputs: %w", err)
		}
		r.outputs = string(b)
	}
	return nil
}

// release writes the Releaser's decision about a root job, as the release
// moves (mRelease, mSkip, mFailRelease) would have left its row.
func (r *jobRow) release(t *txn, rel Release) {
	now := ms(t.now)
	end := func(status kiln.JobStatus, msg string) {
		r.status, r.result, r.err, r.finished = status, string(status.Result()), nullString(msg), now
	}
	switch {
	case rel.Fail != "":
		end(kiln.JobFailed, rel.Fail)
		return
	case rel.Skip:
		end(kiln.JobSkipped, cmp.Or(rel.SkipReason, defaultSkipReason))
		return
	}
	r.status, r.reason, r.since, r.queuedAt = kiln.JobQueued, ReasonWaiting, now, now
	if rel.Requirement != nil {
		r.key = rel.Requirement.Key()
	}
	if rel.Spec != nil {
		r.spec = string(rel.Spec)
	}
	if timeout := cmp.Or(rel.QueueTimeout, t.db.cfg.QueueTimeout); timeout > 0 {
		r.expiresAt = ms(t.now.Add(timeout))
	}
}

// releaseRest releases what creating a run releases besides its plain
// roots: the first wave of each max_parallel group, and the dependents of
// groups carried over whole from a rerun (every child reused), which have
// ended already.
func (t *txn) releaseRest(ctx context.Context, runID string, jobs []NewJob) error {
	waves := runrules.Waves{}
	reusedBases := map[string]bool{}
	for _, j := range jobs {
		if done, seen := reusedBases[j.Base]; !seen || done {
			reusedBases[j.Base] = j.Reuse != nil
		}
		if len(j.Needs) == 0 && j.Reuse == nil && j.MaxParallel > 0 {
			waves.Add(runrules.Group{RunID: runID, Base: j.Base}, j.MaxParallel)
		}
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
