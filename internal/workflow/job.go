package workflow

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// Job is one job of a workflow. A matrix job expands into Variants, each
// of which runs as its own job; every other job has exactly one Variant.
type Job struct {
	ID    string
	Pos   Pos // where the job's id is written
	Needs []Need
	// If is the job's condition, evaluated once its needs are met; nil
	// means run whenever the needs are met.
	If *expr.Expr
	// RunsOn lists labels an agent must all carry; ExcludeLabels, labels it
	// must carry none of. Both may hold expressions.
	RunsOn        []*expr.Template
	ExcludeLabels []*expr.Template
	Env           []EnvVar
	Matrix        *Matrix // nil for a job without a matrix
	Variants      []Variant
	// Timeout bounds the job, agent-enforced; 0 means no job timeout (each
	// step still has its own). TimeoutExpr is a timeout written as an
	// expression, evaluated when the job is released (Timeout is then 0).
	Timeout     time.Duration
	TimeoutExpr *expr.Template
	// OnAgentLost is what happens to a started job whose agent is lost after
	// the recovery window: "retry" (once; the default) or "fail" (the
	// default for a job with a context).
	OnAgentLost string
	// Checkout is false when the job asked not to check out the repository.
	Checkout bool
	Steps    []*Step
	// Resources are the CPU and memory the job asks for; nil when it
	// states none (a scaler then uses its default_resources).
	Resources *Resources

	// Keys recognised but not supported yet; always zero in a valid plan.
	// They are parsed so the release that supports them only lifts the error.
	Context   string
	Secrets   []string
	Container *Container
	Cache     []Cache
	Artifacts []Artifact
}

// OnAgentLost policies.
const (
	OnAgentLostRetry = "retry"
	OnAgentLostFail  = "fail"
)

// Need is one entry of a job's needs: the job it waits for, and the results
// of that job under which this one may run.
type Need struct {
	Job  string
	When []kiln.Result // default [success]; in kiln.Results order
}

// Accepts reports whether result r of the needed job satisfies the need.
func (n Need) Accepts(r kiln.Result) bool { return slices.Contains(n.When, r) }

func (p *parser) parseJobs(w *Workflow, n *yaml.Node) {
	pairs, ok := p.mapping(n, "jobs")
	if !ok {
		return
	}
	if len(pairs) == 0 {
		p.errorf(n, "jobs: a workflow needs at least one job")
		return
	}
	if len(pairs) > MaxJobs {
		p.errorf(n, "jobs: %d jobs; a workflow may define at most %d", len(pairs), MaxJobs)
		return
	}
	needNodes := map[*Job][]*yaml.Node{}
	for _, pr := range pairs {
		if msg := idProblem(pr.key, "job id"); msg != "" {
			p.errorf(pr.k, "jobs: %s", msg)
			continue
		}
		job, needs := p.parseJob(pr)
		if job == nil {
			continue
		}
		w.Jobs = append(w.Jobs, job)
		w.jobs[job.ID] = job
		if needs != nil {
			needNodes[job] = needs
		}
	}
	p.checkNeeds(w, needNodes)
	checkArtifactNames(p, w)
	total := 0
	for _, j := range w.Jobs {
		total += len(j.Variants)
	}
	if total > MaxExpandedJobs {
		p.errorf(n, "jobs: the workflow expands to %d jobs (matrix children included); at most %d", total, MaxExpandedJobs)
	}
}

// parseJob reads one job; it also returns the node of each need, checked
// once every job is known.
func (p *parser) parseJob(pr pair) (*Job, []*yaml.Node) {
	what := "job " + strconv.Quote(pr.key)
	pairs, ok := p.mapping(pr.v, what)
	if !ok {
		return nil, nil
	}
	f := p.fields(pairs, what, jobKeys)
	j := &Job{ID: pr.key, Pos: posOf(pr.k), OnAgentLost: OnAgentLostRetry, Checkout: true}
	var needNodes []*yaml.Node
	if x, has := f["needs"]; has {
		j.Needs, needNodes = p.parseNeeds(x.v)
	}
	if x, has := f["if"]; has {
		j.If = p.cond(x.v, "if", LocJobIf, j)
	}
	if x, has := f["runs_on"]; has {
		j.RunsOn = p.labels(x.v, "runs_on", j)
	}
	if x, has := f["exclude_labels"]; has {
		j.ExcludeLabels = p.labels(x.v, "exclude_labels", j)
	}
	if x, has := f["env"]; has {
		j.Env = p.parseEnv(x.v, "env", LocJob, j)
	}
	p.parseMatrix(j, pr.k, f)
	if x, has := f["timeout"]; has {
		if x.v.Kind == yaml.ScalarNode && strings.Contains(x.v.Value, "${{") {
			j.TimeoutExpr = p.text(x.v, "timeout", LocJob, j)
		} else {
			j.Timeout, _ = p.duration(x.v, "timeout")
		}
	}
	if x, has := f["resources"]; has {
		j.Resources = p.parseResources(x.v, j)
	}
	p.parseNotYet(j, f)
	if x, has := f["artifacts"]; has {
		j.Artifacts = p.parseArtifacts(x.v, j)
	}
	if x, has := f["cache"]; has {
		j.Cache = p.parseCaches(x.v, j)
	}
	if j.Context != "" {
		j.OnAgentLost = OnAgentLostFail
	}
	if x, has := f["on_agent_lost"]; has {
		if s, good := p.str(x.v, "on_agent_lost"); good {
			if s != OnAgentLostRetry && s != OnAgentLostFail {
				p.errorf(x.v, "on_agent_lost: %q is not a policy; use retry or fail", s)
			}
			j.OnAgentLost = s
		}
	}
	if x, has := f["checkout"]; has {
		j.Checkout, _ = p.boolean(x.v, "checkout")
	}
	if x, has := f["steps"]; has {
		j.Steps = p.parseSteps(x.v, j)
	} else {
		p.errorf(pr.k, "%s needs steps: (a list of steps to run)", what)
	}
	return j, needNodes
}

// MaxLabels bounds runs_on and exclude_labels.
const MaxLabels = kiln.MaxLabels

// labels reads runs_on or exclude_labels: label names, which may hold
// expressions (rendered when the job is enqueued).
func (p *parser) labels(n *yaml.Node, key string, j *Job) []*expr.Template {
	items, _ := p.strList(n, key)
	if len(items) > MaxLabels {
		p.errorf(n, "%s: %d labels; at most %d", key, len(items), MaxLabels)
		return nil
	}
	var out []*expr.Template
	for _, it := range items {
		if !strings.Contains(it.Value, "${{") {
			if err := kiln.ValidateLabels([]string{it.Value}); err != nil || strings.TrimSpace(it.Value) == "" {
				p.errorf(it, "%s: %s", key, labelProblem(it.Value, err))
				continue
			}
		}
		out = append(out, p.text(it, key, LocJob, j))
	}
	return out
}

func labelProblem(l string, err error) string {
	if err == nil {
		return "a label is empty"
	}
	return kiln.ErrorMessage(err)
}

// parseNeeds reads needs: a job id, or a list of ids and {job, when}
// mappings. It returns the node naming each need, for later errors.
func (p *parser) parseNeeds(n *yaml.Node) ([]Need, []*yaml.Node) {
	items, _ := p.list(n, "needs")
	var out []Need
	var nodes []*yaml.Node
	for _, it := range items {
		need := Need{When: []kiln.Result{kiln.ResultSuccess}}
		switch it.Kind {
		case yaml.ScalarNode:
			s, ok := p.str(it, "needs")
			if !ok {
				continue
			}
			need.Job = s
			nodes = append(nodes, it)
		case yaml.MappingNode:
			pairs, _ := p.mapping(it, "a need")
			f := p.fields(pairs, "a need", needKeys)
			jn, has := f["job"]
			if !has {
				p.errorf(it, "needs: job: is missing")
				continue
			}
			s, ok := p.str(jn.v, "job")
			if !ok {
				continue
			}
			need.Job = s
			nodes = append(nodes, jn.v)
			if w, has := f["when"]; has {
				need.When = p.parseWhen(w.v)
			}
		default:
			p.errorf(it, "needs: expected a job id or {job: …, when: …}, found %s", describe(it))
			continue
		}
		out = append(out, need)
	}
	return out, nodes
}

// whenWords are the accepted words of when:.
var whenWords = []string{"success", "failure", "cancelled", "skipped", "always"}

// parseWhen reads when: one word or a list; always is every result.
func (p *parser) parseWhen(n *yaml.Node) []kiln.Result {
	items, _ := p.strList(n, "when")
	set := map[kiln.Result]bool{}
	for _, it := range items {
		switch it.Value {
		case "always":
			for _, r := range kiln.Results {
				set[r] = true
			}
		case "success", "failure", "cancelled", "skipped":
			set[kiln.Result(it.Value)] = true
		default:
			p.errorf(it, "when: %q is not a result; use %s%s", it.Value, strings.Join(whenWords, ", "), didYouMean(it.Value, whenWords))
		}
	}
	if len(items) == 0 {
		p.errorf(n, "when: the list is empty")
	}
	var out []kiln.Result
	for _, r := range kiln.Results {
		if set[r] {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return []kiln.Result{kiln.ResultSuccess}
	}
	return out
}
