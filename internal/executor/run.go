package executor

import (
	"fmt"
	"maps"
	"slices"

	"github.com/kilnci/kiln"
)

// jobState is what one job carries from step to step.
type jobState struct {
	ws      *workspace
	masker  *masker
	setup   *stepLog // the checkout pseudo-step's log: checkout, then artifacts
	env     envMap   // workflow env, job env, then $KILN_ENV additions
	paths   []string // $KILN_PATH additions, most recent first
	outputs map[string]string

	failed    bool   // a step failed without continue_on_error, or the checkout failed
	cancelled bool   // a cancel stopped or skipped something
	timedOut  bool   // the job timeout fired
	firstErr  string // the first failure, for Result.Error
	steps     []StepEvent
}

// status is the job status the status functions see.
func (js *jobState) status() kiln.Result {
	switch {
	case js.cancelled:
		return kiln.ResultCancelled
	case js.failed:
		return kiln.ResultFailure
	}
	return kiln.ResultSuccess
}

func (js *jobState) fail(msg string) {
	if !js.failed {
		js.firstErr = msg
	}
	js.failed = true
}

// run is the job, start to end; it returns the result once the workspace
// is cleaned up.
func (e *Execution) run() Result {
	res := Result{Outputs: map[string]string{}}
	fail := func(err error) Result {
		res.Status, res.Error = kiln.JobFailed, err.Error()
		return res
	}
	if err := supported(); err != nil {
		return fail(err)
	}
	if err := e.job.validate(); err != nil {
		return fail(err)
	}
	ws, err := newWorkspace(e.x.cfg.WorkRoot, e.job.JobID, e.x.cfg.Isolation.StepUser)
	if err != nil {
		return fail(err)
	}
	e.jobDir = ws.root
	js := &jobState{
		ws:      ws,
		masker:  newMasker(e.secretValues()),
		env:     envMap{},
		outputs: map[string]string{},
	}
	js.env.setAll(e.job.WorkflowEnv)
	js.env.setAll(e.job.JobEnv)

	js.setup = e.newStepLog(CheckoutIndex, js.masker)
	if e.job.Checkout != nil {
		e.runCheckout(js)
	}
	e.fetchArtifacts(js)
	restored := e.restoreCaches(js)
	for i := range e.job.Steps {
		e.runStep(i, js)
	}
	e.uploadArtifacts(js)
	e.saveCaches(js, restored)
	js.setup.close()

	res.Outputs = js.outputs
	res.Steps = js.steps
	switch {
	case js.cancelled:
		res.Status, res.Error = kiln.JobCancelled, "the job was cancelled"
	case js.timedOut:
		res.Status, res.Error = kiln.JobFailed, fmt.Sprintf("job timed out after %s", e.job.Timeout)
	case js.failed:
		res.Status, res.Error = kiln.JobFailed, js.firstErr
	default:
		res.Status = kiln.JobSuccess
	}
	res.Error = js.masker.mask(res.Error)
	if err := ws.remove(e.job.KeepWorkspace); err != nil {
		e.log.Warn("remove the job directory", "dir", ws.root, "err", err)
	}
	if e.job.KeepWorkspace {
		res.Workspace = ws.dir
	}
	return res
}

// secretValues are the values to mask: the job's secrets and the checkout
// credentials.
func (e *Execution) secretValues() []string {
	vals := make([]string, 0, len(e.job.Secrets)+2)
	for _, k := range sortedKeys(e.job.Secrets) {
		vals = append(vals, e.job.Secrets[k])
	}
	if c := e.job.Checkout; c != nil {
		if c.Auth != nil {
			vals = append(vals, c.Auth.Password, string(c.Auth.SSHKey))
		}
		if a := httpAuth(c); a != nil {
			vals = append(vals, a.Password, basicAuth(a))
		}
	}
	return vals
}

// finish emits a step's terminal event and records it.
func (e *Execution) finish(js *jobState, ev StepEvent) {
	ev.Error = js.masker.mask(ev.Error)
	e.log.Debug("step finished", "index", ev.Index, "status", ev.Status, "attempt", ev.Attempt, "exit_code", ev.ExitCode)
	e.em.step(ev)
	js.steps = append(js.steps, ev)
}

// skip reports a step that did not run.
func (e *Execution) skip(js *jobState, index int, name string) {
	now := e.x.cfg.Clock()
	e.finish(js, StepEvent{Index: index, Name: name, Status: kiln.StepSkipped, ExitCode: -1, StartedAt: now, FinishedAt: now})
}

// contexts are the expression contexts of a step: the job's plus env and job.
func (e *Execution) contexts(js *jobState, env envMap) map[string]any {
	ctx := make(map[string]any, len(e.job.Contexts)+2)
	maps.Copy(ctx, e.job.Contexts)
	envCtx := make(map[string]any, len(env))
	for k, v := range env {
		envCtx[k] = v
	}
	ctx["env"] = envCtx
	ctx["job"] = map[string]any{"status": string(js.status())}
	return ctx
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }
