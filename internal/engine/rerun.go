package engine

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/workflow"
)

// Rerun starts a new run of a finished run's workflow, on the same commit,
// event and inputs, with the exact workflow definition the run executed.
// With failedOnly, only the jobs that failed or were cancelled run again,
// with every job that depends on them; the others are carried over with
// their results and outputs. The new run records which run it reruns.
func (e *Engine) Rerun(ctx context.Context, runID string, failedOnly bool) (store.CreatedRun, error) {
	orig, err := e.db.Runs().Get(ctx, runID)
	if err != nil {
		return store.CreatedRun{}, err
	}
	if !orig.Status.Terminal() {
		return store.CreatedRun{}, kiln.Errorf(kiln.CodeConflict, "run #%d is still %s; wait for it or cancel it first", orig.Number, orig.Status)
	}
	content, err := e.db.Runs().WorkflowDefinition(ctx, orig.WorkflowHash)
	if err != nil {
		return store.CreatedRun{}, err
	}
	wf, err := workflow.Parse(orig.WorkflowFile, content)
	if err != nil {
		return store.CreatedRun{}, fmt.Errorf("rerun of run #%d: its stored workflow no longer parses: %w", orig.Number, err)
	}
	var ev kiln.Event
	if err := json.Unmarshal(orig.Event, &ev); err != nil {
		return store.CreatedRun{}, fmt.Errorf("rerun of run #%d: stored event: %w", orig.Number, err)
	}
	var inputs map[string]any
	if len(orig.Inputs) > 0 {
		if err := json.Unmarshal(orig.Inputs, &inputs); err != nil {
			return store.CreatedRun{}, fmt.Errorf("rerun of run #%d: stored inputs: %w", orig.Number, err)
		}
	}
	in := runInput{
		wf: wf, content: content, event: &ev, inputs: inputs, decision: orig.Trace,
		source: orig.Source, rerunOf: orig.ID, attempt: attemptOf(orig) + 1,
	}
	if ev.Fork != nil {
		// A rerun is an admin's act and runs at once, but a fork's code
		// stays a fork's: its jobs keep to the labels its source allows
		// forks today (none when the source is gone).
		if src, err := e.db.Sources().Get(ctx, orig.Source); err == nil {
			in.forkLabels = src.ForkLabels
		} else if kiln.ErrorCode(err) != kiln.CodeNotFound {
			return store.CreatedRun{}, err
		}
	}
	if failedOnly {
		in.reuse = reusable(orig.Jobs)
		if len(in.reuse) == len(orig.Jobs) {
			return store.CreatedRun{}, kiln.Errorf(kiln.CodeConflict, "run #%d has no failed or cancelled jobs to rerun", orig.Number)
		}
	}
	nr, err := newRun(in)
	if err != nil {
		return store.CreatedRun{}, err
	}
	cr, err := e.db.Runs().Create(ctx, nr)
	if err != nil {
		return store.CreatedRun{}, err
	}
	e.log.Info("run rerun", "run", cr.Number, "rerun_of", orig.Number, "failed_only", failedOnly)
	e.created(cr)
	return cr, nil
}

// reusable returns the jobs a failed-jobs rerun carries over: every job that
// neither failed nor was cancelled and does not depend, directly or not, on
// one that did.
func reusable(jobs []store.Job) map[string]store.Reused {
	dependents := map[string][]string{} // base → bases that need it
	for _, j := range jobs {
		for _, n := range j.Needs {
			dependents[n.Job] = append(dependents[n.Job], j.Base)
		}
	}
	again := map[string]bool{} // job names to run again
	rerunBases := map[string]bool{}
	var mark func(base string)
	mark = func(base string) {
		for _, d := range dependents[base] {
			if !rerunBases[d] {
				rerunBases[d] = true
				mark(d)
			}
		}
	}
	for _, j := range jobs {
		if r := j.Status.Result(); r == kiln.ResultFailure || r == kiln.ResultCancelled {
			again[j.Name] = true
			mark(j.Base)
		}
	}
	out := map[string]store.Reused{}
	for _, j := range jobs {
		if again[j.Name] || rerunBases[j.Base] {
			continue
		}
		out[j.Name] = store.Reused{Status: j.Status, Outputs: j.Outputs, Error: j.Error}
	}
	return out
}

// attemptOf reads the attempt number the run's jobs were created with.
func attemptOf(r store.Run) int {
	for _, j := range r.Jobs {
		if b, err := jobspec.Decode(j.Spec); err == nil && b.Release.Attempt > 0 {
			return b.Release.Attempt
		}
	}
	return 1
}
