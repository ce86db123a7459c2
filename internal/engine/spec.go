package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/workflow"
)

// runInput is everything a new run is built from.
type runInput struct {
	wf       *workflow.Workflow
	content  []byte
	event    *kiln.Event
	inputs   map[string]any
	decision json.RawMessage
	source   string
	delivery int64
	parent   string
	rerunOf  string
	attempt  int
	// reuse maps job names to results carried over from the run being
	// rerun (a failed-jobs rerun); those jobs are not run again.
	reuse map[string]store.Reused
	// only limits the run to these job ids and their needs (nil: all).
	only []string
	// hold holds the run for approval with this reason.
	hold string
	// forkLabels are the mandatory labels a fork's jobs may use.
	forkLabels kiln.Labels
}

// newRun builds the store's NewRun for one matched workflow.
func newRun(in runInput) (store.NewRun, error) {
	evJSON, err := json.Marshal(in.event)
	if err != nil {
		return store.NewRun{}, fmt.Errorf("encode event: %w", err)
	}
	inputsJSON, err := json.Marshal(orEmpty(in.inputs))
	if err != nil {
		return store.NewRun{}, fmt.Errorf("encode inputs: %w", err)
	}
	nr := store.NewRun{
		Source: in.source, Repository: in.event.Repository,
		Workflow: in.wf.Name, WorkflowFile: in.wf.File, WorkflowHash: in.wf.Hash, WorkflowContent: in.content,
		Event: evJSON, Inputs: inputsJSON, Trace: in.decision,
		Ref: in.event.Ref, SHA: in.event.SHA, Timeout: in.wf.Timeout,
		ParentRunID: in.parent, RerunOf: in.rerunOf, DeliveryID: in.delivery, Hold: in.hold,
	}
	contexts := map[string]any{
		"event":  workflow.EventContext(in.event),
		"inputs": orEmpty(in.inputs),
	}
	keep, err := selectJobs(in.wf, in.only)
	if err != nil {
		return store.NewRun{}, err
	}
	for _, j := range in.wf.Jobs {
		if !keep[j.ID] {
			continue
		}
		for _, v := range j.Variants {
			nj, err := newJob(in, j, v, contexts)
			if err != nil {
				return store.NewRun{}, err
			}
			if r, ok := in.reuse[nj.Name]; ok {
				nj.Reuse = &r
			}
			nr.Jobs = append(nr.Jobs, nj)
		}
	}
	return nr, nil
}

// selectJobs returns the job ids a run includes: every job, or the named
// ones and everything they need.
func selectJobs(wf *workflow.Workflow, only []string) (map[string]bool, error) {
	keep := map[string]bool{}
	if len(only) == 0 {
		for _, j := range wf.Jobs {
			keep[j.ID] = true
		}
		return keep, nil
	}
	var add func(id string) error
	add = func(id string) error {
		if keep[id] {
			return nil
		}
		j := wf.Job(id)
		if j == nil {
			return kiln.Errorf(kiln.CodeInvalid, "workflow %s has no job %q", wf.Name, id)
		}
		keep[id] = true
		for _, n := range j.Needs {
			if err := add(n.Job); err != nil {
				return err
			}
		}
		return nil
	}
	for _, id := range only {
		if err := add(id); err != nil {
			return nil, err
		}
	}
	return keep, nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// newJob builds one matrix child's NewJob: its stored spec (jobspec.Job)
// holds the agent's spec as far as it is known now, where the code lives,
// and the source text of what release evaluates — whose parsed form from
// workflow.Parse is kept, so releasing the job parses nothing again.
func newJob(in runInput, j *workflow.Job, v workflow.Variant, contexts map[string]any) (store.NewJob, error) {
	b := jobspec.Job{Agent: jobSpec(in, j, v, contexts), Release: jobspec.Plan{Workflow: in.wf.Name, Attempt: max(in.attempt, 1)}}
	fork := in.event.Fork != nil
	if j.Checkout {
		b.Checkout = &jobspec.Checkout{Source: in.source, Repository: in.event.Repository,
			URL: in.event.CloneURL, Ref: in.event.Ref, SHA: in.event.SHA, Fork: fork}
	}
	rp := &b.Release
	if j.If != nil {
		rp.If = j.If.String()
	}
	req, literal := literalRequirement(j)
	if fork {
		rp.Fork, rp.ForkLabels = true, in.forkLabels
		req.Fork, req.ForkLabels = true, kiln.NewLabels(in.forkLabels...)
	}
	if j.Resources != nil {
		req.Resources = j.Resources.Amount
	}
	if !literal || !j.Resources.Literal() {
		rp.RunsOn, rp.Exclude = sources(j.RunsOn), sources(j.ExcludeLabels)
		rp.CPUs, rp.Memory = resourceSources(j.Resources)
	}
	if j.TimeoutExpr != nil {
		rp.Timeout = sources([]*expr.Template{j.TimeoutExpr})[0]
	}
	for _, e := range in.wf.Env {
		rp.WorkflowEnv = append(rp.WorkflowEnv, variable(e.Name, e.Value))
	}
	for _, e := range j.Env {
		rp.JobEnv = append(rp.JobEnv, variable(e.Name, e.Value))
	}
	for _, kv := range v.Values {
		rp.Matrix = append(rp.Matrix, variable(kv.Key, kv.Template))
	}
	var needs []store.NeedEdge
	for _, n := range j.Needs {
		rp.Needs = append(rp.Needs, n.Job)
		needs = append(needs, store.NeedEdge{Job: n.Job, Accept: slices.Clone(n.When)})
	}
	raw, err := b.Encode()
	if err != nil {
		return store.NewJob{}, err
	}
	nj := store.NewJob{
		Name: v.Name, Base: j.ID, Needs: needs,
		OnAgentLost: store.OnAgentLost(j.OnAgentLost), Requirement: req, Spec: raw,
	}
	if j.Matrix != nil {
		nj.MaxParallel, nj.FailFast = j.Matrix.MaxParallel, j.Matrix.FailFast
		m := map[string]string{}
		for _, kv := range v.Values {
			m[kv.Key] = kv.Value
		}
		if nj.Matrix, err = json.Marshal(m); err != nil {
			return store.NewJob{}, err
		}
	}
	for _, s := range j.Steps {
		nj.Steps = append(nj.Steps, s.Name)
	}
	return nj, nil
}

// jobSpec is the agent's view of the job, without what release fills in
// (job env, the needs and matrix contexts) or dispatch adds (the checkout,
// with credentials).
func jobSpec(in runInput, j *workflow.Job, v workflow.Variant, contexts map[string]any) proto.JobSpec {
	spec := proto.JobSpec{
		Name: v.Name, Workflow: in.wf.Name,
		Contexts:  map[string]any{"event": contexts["event"], "inputs": contexts["inputs"]},
		TimeoutMS: j.Timeout.Milliseconds(),
	}
	for _, s := range j.Steps {
		ps := proto.Step{
			Name: s.Name, Shell: s.Shell, TimeoutMS: s.Timeout.Milliseconds(),
			ContinueOnError: s.ContinueOnError,
		}
		if s.Run != nil {
			ps.Run = s.Run.Source()
		}
		if s.If != nil {
			ps.If = s.If.String()
		}
		if s.WorkingDirectory != nil {
			ps.WorkingDirectory = s.WorkingDirectory.Source()
		}
		if len(s.Env) > 0 {
			ps.Env = map[string]string{}
			for _, e := range s.Env {
				ps.Env[e.Name] = e.Value.Source()
			}
		}
		if s.Retry.MaxAttempts > 1 {
			ps.Retry = &proto.Retry{
				MaxAttempts: s.Retry.MaxAttempts, DelayMS: s.Retry.Delay.Milliseconds(),
				MaxDelayMS: s.Retry.MaxDelay.Milliseconds(), Backoff: s.Retry.Backoff,
			}
		}
		spec.Steps = append(spec.Steps, ps)
	}
	for _, a := range j.Artifacts {
		if a.Name == nil {
			continue
		}
		// A matrix child's name carries its matrix values, so that names
		// stay unique in the run.
		name := a.Name.Source()
		if j.Matrix != nil && !strings.Contains(name, "matrix.") {
			name += strings.TrimPrefix(v.Name, j.ID)
		}
		spec.Artifacts = append(spec.Artifacts, proto.Artifact{Name: name, Paths: a.Paths})
	}
	for _, c := range j.Cache {
		if c.Key == nil {
			continue
		}
		pc := proto.Cache{Key: c.Key.Source(), Paths: c.Paths}
		for _, rk := range c.RestoreKeys {
			pc.RestoreKeys = append(pc.RestoreKeys, rk.Source())
		}
		spec.Caches = append(spec.Caches, pc)
	}
	return spec
}

// literalRequirement returns the job's requirement when runs_on and
// exclude_labels hold no expressions (the common case: it is then known at
// creation and the queue key never changes).
func literalRequirement(j *workflow.Job) (kiln.Requirement, bool) {
	var on, ex []string
	for _, t := range j.RunsOn {
		if !t.IsLiteral() {
			return kiln.Requirement{}, false
		}
		on = append(on, t.Source())
	}
	for _, t := range j.ExcludeLabels {
		if !t.IsLiteral() {
			return kiln.Requirement{}, false
		}
		ex = append(ex, t.Source())
	}
	return kiln.Requirement{RunsOn: kiln.NewLabels(on...), Exclude: kiln.NewLabels(ex...)}, true
}

// resourceSources writes a job's resources for release: each literal
// amount in a form release reads back, each expression as its source
// (its parsed form kept).
func resourceSources(r *workflow.Resources) (cpus, memory string) {
	if r == nil {
		return "", ""
	}
	switch {
	case r.CPUsExpr != nil:
		cpus = sources([]*expr.Template{r.CPUsExpr})[0]
	case r.Amount.MilliCPUs > 0:
		cpus = strconv.FormatInt(r.Amount.MilliCPUs, 10) + "m"
	}
	switch {
	case r.MemoryExpr != nil:
		memory = sources([]*expr.Template{r.MemoryExpr})[0]
	case r.Amount.Memory > 0:
		memory = strconv.FormatInt(r.Amount.Memory, 10)
	}
	return cpus, memory
}

// sources returns the templates' source text, keeping their parsed form
// for release.
func sources(ts []*expr.Template) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Source()
		parsed.keep(t)
	}
	return out
}

// variable is a name and its value's source text, keeping the parsed form
// for release.
func variable(name string, t *expr.Template) jobspec.Var {
	parsed.keep(t)
	return jobspec.Var{Name: name, Value: t.Source()}
}
