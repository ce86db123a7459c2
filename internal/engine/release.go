package engine

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
	"github.com/kilnci/kiln/internal/jobspec"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/workflow"
)

// Release is the engine's store.Releaser, given to store.Open: for a job
// whose needs are met it evaluates `if:`, then workflow env, job env,
// matrix values and runs_on, and returns the job's final spec. It is pure —
// no I/O, only a bounded cache of parsed expressions — because it runs
// inside the store's write transaction. A job whose expressions fail to
// evaluate fails with the reason, naming the expression.
func Release(job store.ReadyJob) store.Release { return release(job, DefaultMaxSpecBytes) }

// DefaultMaxSpecBytes bounds a job's rendered spec (queue.max_spec_bytes).
const DefaultMaxSpecBytes = 1 << 20

// ReleaseWithin is Release with a bound on the job's rendered spec: a job
// whose env, matrix values or runs_on render to more than maxSpec bytes
// fails with a sentence saying so, and rendering stops as soon as the
// bound is passed, so a 14 KB workflow cannot make the server hold 50 MB
// per job (B105).
func ReleaseWithin(maxSpec int) store.Releaser {
	return func(job store.ReadyJob) store.Release { return release(job, maxSpec) }
}

// specBudget counts what a job's spec takes while it is rendered.
type specBudget struct{ used, max int }

func (b *specBudget) take(what string, n int) error {
	if b.used += n; b.used > b.max {
		return fmt.Errorf("the job's spec is larger than queue.max_spec_bytes (%s) once %s is rendered; "+
			"keep large values out of env and matrix (read them in a step instead)", sizeText(b.max), what)
	}
	return nil
}

func sizeText(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

func release(job store.ReadyJob, maxSpec int) store.Release {
	budget := &specBudget{used: len(job.Spec), max: maxSpec}
	if err := budget.take("its stored part", 0); err != nil {
		return store.Release{Fail: err.Error()}
	}
	b, err := jobspec.Decode(job.Spec)
	if err != nil {
		return store.Release{Fail: "internal error: the job's stored spec does not decode"}
	}
	rp := b.Release
	ctx := b.Agent.Contexts
	if ctx == nil {
		ctx = map[string]any{}
	}
	ctx["run"] = map[string]any{
		"id": job.RunID, "number": float64(job.RunNumber), "workflow": rp.Workflow, "attempt": float64(rp.Attempt),
	}
	needs, err := needsContext(job, rp.Needs)
	if err != nil {
		return store.Release{Fail: err.Error()}
	}
	ctx["needs"] = needs

	// Workflow env sees event, inputs and run; job env also env, matrix, needs.
	wfEnv, err := renderEnv(rp.WorkflowEnv, map[string]any{"event": ctx["event"], "inputs": ctx["inputs"], "run": ctx["run"]}, "env", budget)
	if err != nil {
		return store.Release{Fail: err.Error()}
	}
	ctx["env"] = toAny(wfEnv)

	if rp.If != "" {
		ok, err := evalCond(rp.If, ctx)
		if err != nil {
			return store.Release{Fail: err.Error()}
		}
		if !ok {
			return store.Release{Skip: true, SkipReason: "if: " + rp.If + " was false"}
		}
	}

	matrix, err := renderEnv(rp.Matrix, ctx, "matrix", budget)
	if err != nil {
		return store.Release{Fail: err.Error()}
	}
	if len(rp.Matrix) > 0 {
		ctx["matrix"] = toAny(matrix)
	}
	jobEnv, err := renderEnv(rp.JobEnv, ctx, "env", budget)
	if err != nil {
		return store.Release{Fail: err.Error()}
	}
	merged := toAny(wfEnv)
	for k, v := range jobEnv {
		merged[k] = v
	}
	ctx["env"] = merged

	rel := store.Release{}
	if rp.RunsOn != nil || rp.Exclude != nil || rp.CPUs != "" || rp.Memory != "" {
		req, err := requirement(rp.RunsOn, rp.Exclude, ctx)
		if err != nil {
			return store.Release{Fail: err.Error()}
		}
		if req.Resources, err = renderResources(rp.CPUs, rp.Memory, ctx); err != nil {
			return store.Release{Fail: err.Error()}
		}
		// A fork's job keeps its restriction whatever runs_on evaluated to.
		req.Fork, req.ForkLabels = rp.Fork, kiln.NewLabels(rp.ForkLabels...)
		rel.Requirement = &req
	}
	if rp.Timeout != "" {
		d, err := renderTimeout(rp.Timeout, ctx)
		if err != nil {
			return store.Release{Fail: err.Error()}
		}
		b.Agent.TimeoutMS = d.Milliseconds()
	}
	b.Agent.WorkflowEnv, b.Agent.JobEnv = wfEnv, jobEnv
	// The agent evaluates step expressions with these contexts; it adds
	// env (from the two env maps) and job itself.
	delete(ctx, "env")
	b.Agent.Contexts = ctx
	spec, err := b.Encode()
	if err != nil {
		return store.Release{Fail: "internal error: the job's spec does not encode"}
	}
	if len(spec) > maxSpec {
		return store.Release{Fail: fmt.Sprintf("the job's spec is %d bytes once rendered, larger than queue.max_spec_bytes (%s); "+
			"keep large values out of env and matrix (read them in a step instead)", len(spec), sizeText(maxSpec))}
	}
	rel.Spec = spec
	return rel
}

// needsContext builds `needs` for the job: one entry per needed job id (a
// matrix group merged under the agreement rule) and one per matrix child
// name. When the children of a needed matrix job set an output to different
// values, the dependent fails with an error naming them (workflow.md).
func needsContext(job store.ReadyJob, declared []string) (map[string]any, error) {
	out := map[string]any{}
	all := job.Needs()
	for _, d := range declared {
		if n, ok := all[d]; ok {
			for _, key := range sortedKeys(n.Conflicts) {
				return nil, fmt.Errorf("%s", n.Conflicts[key])
			}
		}
	}
	for name, n := range all {
		outputs := map[string]any{}
		for k, v := range n.Outputs {
			outputs[k] = v
		}
		out[name] = map[string]any{"result": string(n.Result), "outputs": outputs}
	}
	return out, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func evalCond(src string, ctx map[string]any) (bool, error) {
	e, err := parsed.condition(src)
	if err != nil {
		return false, fmt.Errorf("if: %v", err)
	}
	ok, err := e.EvalBool(&expr.Env{Contexts: ctx})
	if err != nil {
		return false, fmt.Errorf("if: %s: %v", src, err)
	}
	return ok, nil
}

func render(src string, ctx map[string]any) (string, error) {
	t, err := parsed.template(src)
	if err != nil {
		return "", err
	}
	if t.IsLiteral() {
		return src, nil
	}
	return t.Render(&expr.Env{Contexts: ctx})
}

func renderEnv(entries []jobspec.Var, ctx map[string]any, what string, budget *specBudget) (map[string]string, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		v, err := render(e.Value, ctx)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %s: %v", what, e.Name, e.Value, err)
		}
		if err := budget.take(what+"."+e.Name, len(e.Name)+len(v)); err != nil {
			return nil, err
		}
		out[e.Name] = v
	}
	return out, nil
}

func requirement(runsOn, exclude []string, ctx map[string]any) (kiln.Requirement, error) {
	on, err := renderLabels(runsOn, ctx, "runs_on")
	if err != nil {
		return kiln.Requirement{}, err
	}
	ex, err := renderLabels(exclude, ctx, "exclude_labels")
	if err != nil {
		return kiln.Requirement{}, err
	}
	return kiln.Requirement{RunsOn: kiln.NewLabels(on...), Exclude: kiln.NewLabels(ex...)}, nil
}

func renderLabels(srcs []string, ctx map[string]any, what string) ([]string, error) {
	out := make([]string, 0, len(srcs))
	for _, s := range srcs {
		v, err := render(s, ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %v", what, s, err)
		}
		if err := kiln.ValidateLabels([]string{v}); err != nil {
			return nil, fmt.Errorf("%s: %s evaluated to %q: %s", what, s, v, kiln.ErrorMessage(err))
		}
		out = append(out, v)
	}
	return out, nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// renderTimeout evaluates a job timeout written as an expression; what it
// evaluates to must read as a duration, as a literal timeout must.
// renderResources evaluates a job's resources (B197): what each
// evaluates to must read as a CPU amount or a memory size, or the job
// fails saying what it evaluated to.
func renderResources(cpus, memory string, ctx map[string]any) (kiln.Resources, error) {
	var r kiln.Resources
	for _, x := range []struct {
		key, src string
		read     func(string) (int64, error)
		into     *int64
	}{{"resources.cpus", cpus, workflow.ReadCPUs, &r.MilliCPUs}, {"resources.memory", memory, workflow.ReadMemory, &r.Memory}} {
		if x.src == "" {
			continue
		}
		v, err := render(x.src, ctx)
		if err != nil {
			return r, fmt.Errorf("%s: %s: %v", x.key, x.src, err)
		}
		n, err := x.read(v)
		if err != nil {
			if v == x.src {
				return r, fmt.Errorf("%s: %v", x.key, err)
			}
			return r, fmt.Errorf("%s: %s evaluated to %q: %v", x.key, x.src, v, err)
		}
		*x.into = n
	}
	return r, nil
}

func renderTimeout(src string, ctx map[string]any) (time.Duration, error) {
	v, err := render(src, ctx)
	if err != nil {
		return 0, fmt.Errorf("timeout: %s: %v", src, err)
	}
	v = strings.TrimSpace(v)
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return 0, fmt.Errorf("timeout: %s evaluated to %q, which has no unit; make it evaluate to something like %ss or %sm", src, v, v, v)
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("timeout: %s evaluated to %q, which is not a duration like 30s, 10m or 1h30m", src, v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("timeout: %s evaluated to %q; it must be longer than zero", src, v)
	}
	return d, nil
}
