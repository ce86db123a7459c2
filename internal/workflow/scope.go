package workflow

import (
	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
)

// Location is where an expression stands in a workflow file; it decides
// which contexts the expression may read (docs/workflow.md, "Who evaluates
// what").
type Location int

const (
	// LocWorkflowEnv: workflow env (event, inputs, run).
	LocWorkflowEnv Location = iota
	// LocConcurrencyGroup: concurrency.group (event, inputs, run).
	LocConcurrencyGroup
	// LocJobIf: a job's if: (event, inputs, run, env, needs).
	LocJobIf
	// LocJob: a job's runs_on, exclude_labels, env, container (event,
	// inputs, run, env, matrix, needs).
	LocJob
	// LocMatrixValue: a matrix value (as LocJob, without matrix itself).
	LocMatrixValue
	// LocStepIf: a step's if: (LocJob plus job and the status functions).
	LocStepIf
	// LocStep: a step's env, run, working_directory (LocStepIf's contexts
	// plus hashFiles()).
	LocStep
)

// ScopeFor returns what an expression may use at loc in wf, inside job (nil
// outside jobs): the contexts of docs/workflow.md's table with their types,
// and whether the status functions and hashFiles() are available. The
// engine and the agent can use it to check expressions they build.
func ScopeFor(loc Location, wf *Workflow, job *Job) *expr.Scope {
	ctx := map[string]expr.Type{
		"event":  EventType,
		"inputs": InputsType(wf),
		"run":    RunType,
	}
	s := &expr.Scope{Contexts: ctx}
	if loc == LocWorkflowEnv || loc == LocConcurrencyGroup {
		return s
	}
	ctx["env"] = expr.MapOf(expr.String)
	ctx["needs"] = NeedsType(wf, job)
	if loc == LocJobIf {
		return s
	}
	if loc != LocMatrixValue {
		ctx["matrix"] = MatrixType(job)
	}
	if loc == LocJob || loc == LocMatrixValue {
		return s
	}
	ctx["job"] = JobType
	s.StatusFuncs = true
	s.HashFiles = loc == LocStep
	return s
}

// The types of the contexts whose shape does not depend on the workflow.
var (
	// EventType is the `event` context: the fields of kiln.Event that
	// workflow.md lists (EventContext builds its value).
	EventType = expr.ObjectOf(map[string]expr.Type{
		"name": expr.String, "action": expr.String, "ref": expr.String, "sha": expr.String,
		"branch": expr.String, "base_branch": expr.String, "tag": expr.String,
		"repository": expr.String, "actor": expr.String, "message": expr.String,
		"pr":            expr.ObjectOf(map[string]expr.Type{"number": expr.Number, "title": expr.String}),
		"changed_files": expr.ArrayOf(expr.String),
	})
	// RunType is the `run` context: the run's id, number, workflow name and
	// attempt.
	RunType = expr.ObjectOf(map[string]expr.Type{"id": expr.String, "number": expr.Number, "workflow": expr.String, "attempt": expr.Number})
	// JobType is the `job` context of steps: the job's (variant's) name and
	// its status so far.
	JobType = expr.ObjectOf(map[string]expr.Type{"name": expr.String, "status": expr.String})
	// needType is one entry of the `needs` context.
	needType = expr.ObjectOf(map[string]expr.Type{"result": expr.String, "outputs": expr.MapOf(expr.String)})
)

// InputsType is the `inputs` context: the workflow's dispatch inputs with
// their types (choice and string: string; boolean: bool; number: number).
func InputsType(wf *Workflow) expr.Type {
	fields := map[string]expr.Type{}
	if wf != nil && wf.On.Dispatch != nil {
		for _, in := range wf.On.Dispatch.Inputs {
			switch in.Type {
			case InputBoolean:
				fields[in.Name] = expr.Bool
			case InputNumber:
				fields[in.Name] = expr.Number
			default:
				fields[in.Name] = expr.String
			}
		}
	}
	return expr.ObjectOf(fields)
}

// MatrixType is the `matrix` context of a job: its matrix keys, including
// keys added by include:, all strings.
func MatrixType(job *Job) expr.Type {
	fields := map[string]expr.Type{}
	if job != nil {
		for _, v := range job.Variants {
			for _, kv := range v.Values {
				fields[kv.Key] = expr.String
			}
		}
		if job.Matrix != nil {
			for _, k := range job.Matrix.Keys {
				fields[k] = expr.String
			}
		}
	}
	return expr.ObjectOf(fields)
}

// NeedsType is the `needs` context of a job: one entry per needed job, and
// one per child of a needed matrix job (needs['test (1.26)']), each with
// its result and outputs.
func NeedsType(wf *Workflow, job *Job) expr.Type {
	fields := map[string]expr.Type{}
	if job != nil {
		for _, n := range job.Needs {
			fields[n.Job] = needType
			if dep := wf.Job(n.Job); dep != nil && dep.Matrix != nil {
				for _, v := range dep.Variants {
					fields[v.Name] = needType
				}
			}
		}
	}
	return expr.ObjectOf(fields)
}

// EventContext is the value of the `event` context for ev, shaped as
// EventType says (pr is null outside pull requests).
func EventContext(ev *kiln.Event) map[string]any {
	files := make([]any, len(ev.ChangedFiles))
	for i, f := range ev.ChangedFiles {
		files[i] = f
	}
	var pr any
	if ev.PR != nil {
		pr = map[string]any{"number": float64(ev.PR.Number), "title": ev.PR.Title}
	}
	return map[string]any{
		"name": string(ev.Name), "action": ev.Action, "ref": ev.Ref, "sha": ev.SHA,
		"branch": ev.Branch, "base_branch": ev.BaseBranch, "tag": ev.Tag,
		"repository": ev.Repository, "actor": ev.Actor, "message": ev.Message,
		"pr": pr, "changed_files": files,
	}
}
