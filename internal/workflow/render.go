package workflow

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/expr"
)

// MarshalJSON renders the normalized plan for people and golden files:
// snake_case keys named like the file's keys, defaults filled in, durations
// as Go duration strings, expressions and patterns as written. It is a
// display form; the way back from it to a Workflow is Parse on the file.
func (w *Workflow) MarshalJSON() ([]byte, error) {
	return json.Marshal(planOf(w))
}

type planWorkflow struct {
	File    string       `json:"file"`
	Name    string       `json:"name"`
	Hash    string       `json:"hash"`
	On      planTriggers `json:"on"`
	Env     []planEnv    `json:"env,omitempty"`
	Timeout string       `json:"timeout,omitempty"`
	Jobs    []planJob    `json:"jobs"`
}

type planTriggers struct {
	Order       []kiln.EventName `json:"order"`
	Push        *planPush        `json:"push,omitempty"`
	PullRequest *planPR          `json:"pull_request,omitempty"`
	Tag         *Patterns        `json:"tag,omitempty"`
	Schedule    []planSchedule   `json:"schedule,omitempty"`
	Dispatch    *planDispatch    `json:"dispatch,omitempty"`
}

type planPush struct {
	Branches Patterns `json:"branches"`
	Paths    Patterns `json:"paths"`
}

type planPR struct {
	Types    []string `json:"types"`
	Branches Patterns `json:"branches"`
	Paths    Patterns `json:"paths"`
}

type planSchedule struct {
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
}

type planDispatch struct {
	Inputs []planInput `json:"inputs"`
}

type planInput struct {
	Name        string    `json:"name"`
	Type        InputType `json:"type"`
	Options     []string  `json:"options,omitempty"`
	Default     any       `json:"default"`
	Required    bool      `json:"required"`
	Description string    `json:"description,omitempty"`
}

type planEnv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type planJob struct {
	ID            string        `json:"id"`
	Line          int           `json:"line"`
	Needs         []planNeed    `json:"needs,omitempty"`
	If            string        `json:"if,omitempty"`
	RunsOn        []string      `json:"runs_on,omitempty"`
	ExcludeLabels []string      `json:"exclude_labels,omitempty"`
	Env           []planEnv     `json:"env,omitempty"`
	Matrix        *planMatrix   `json:"matrix,omitempty"`
	Variants      []planVariant `json:"variants"`
	Timeout       string        `json:"timeout,omitempty"`
	OnAgentLost   string        `json:"on_agent_lost"`
	Checkout      bool          `json:"checkout"`
	Resources     *planAmount   `json:"resources,omitempty"`
	Steps         []planStep    `json:"steps"`
}

// planAmount is a job's resources: CPUs and memory as read (canonical:
// "1.5", "4 GiB") or an expression's source.
type planAmount struct {
	CPUs   string `json:"cpus,omitempty"`
	Memory string `json:"memory,omitempty"`
}

func planAmountOf(r *Resources) *planAmount {
	if r == nil {
		return nil
	}
	out := &planAmount{}
	if r.CPUsExpr != nil {
		out.CPUs = r.CPUsExpr.Source()
	} else if r.Amount.MilliCPUs > 0 {
		out.CPUs = kiln.FormatCPUs(r.Amount.MilliCPUs)
	}
	if r.MemoryExpr != nil {
		out.Memory = r.MemoryExpr.Source()
	} else if r.Amount.Memory > 0 {
		out.Memory = kiln.FormatMemory(r.Amount.Memory)
	}
	return out
}

type planNeed struct {
	Job  string        `json:"job"`
	When []kiln.Result `json:"when"`
}

type planMatrix struct {
	Keys        []string   `json:"keys,omitempty"`
	Values      [][]string `json:"values,omitempty"`
	Include     []kvList   `json:"include,omitempty"`
	Exclude     []kvList   `json:"exclude,omitempty"`
	MaxParallel int        `json:"max_parallel,omitempty"`
	FailFast    bool       `json:"fail_fast"`
}

type planVariant struct {
	Name   string `json:"name"`
	Values kvList `json:"values,omitempty"`
}

type planStep struct {
	Index            int       `json:"index"`
	Line             int       `json:"line"`
	Name             string    `json:"name"`
	Run              string    `json:"run"`
	Shell            string    `json:"shell"`
	If               string    `json:"if,omitempty"`
	Env              []planEnv `json:"env,omitempty"`
	WorkingDirectory string    `json:"working_directory,omitempty"`
	Timeout          string    `json:"timeout"`
	Retry            planRetry `json:"retry"`
	ContinueOnError  bool      `json:"continue_on_error"`
}

type planRetry struct {
	MaxAttempts int    `json:"max_attempts"`
	Delay       string `json:"delay,omitempty"`
	Backoff     string `json:"backoff,omitempty"`
	MaxDelay    string `json:"max_delay,omitempty"`
}

func planOf(w *Workflow) planWorkflow {
	out := planWorkflow{File: w.File, Name: w.Name, Hash: w.Hash, On: planTriggersOf(&w.On), Env: planEnvOf(w.Env), Timeout: dur(w.Timeout)}
	for _, j := range w.Jobs {
		out.Jobs = append(out.Jobs, planJobOf(j))
	}
	return out
}

func planTriggersOf(t *Triggers) planTriggers {
	out := planTriggers{Order: t.Order}
	if t.Push != nil {
		out.Push = &planPush{Branches: t.Push.Branches, Paths: t.Push.Paths}
	}
	if t.PullRequest != nil {
		out.PullRequest = &planPR{Types: t.PullRequest.Types, Branches: t.PullRequest.Branches, Paths: t.PullRequest.Paths}
	}
	if t.Tag != nil {
		out.Tag = &t.Tag.Patterns
	}
	for _, s := range t.Schedule {
		out.Schedule = append(out.Schedule, planSchedule{Cron: s.Cron, Timezone: s.Timezone.String()})
	}
	if t.Dispatch != nil {
		out.Dispatch = &planDispatch{Inputs: []planInput{}}
		for _, in := range t.Dispatch.Inputs {
			out.Dispatch.Inputs = append(out.Dispatch.Inputs, planInput{Name: in.Name, Type: in.Type, Options: in.Options, Default: in.Default, Required: in.Required, Description: in.Description})
		}
	}
	return out
}

func planJobOf(j *Job) planJob {
	out := planJob{ID: j.ID, Line: j.Pos.Line, If: condSource(j.If), RunsOn: sources(j.RunsOn), ExcludeLabels: sources(j.ExcludeLabels),
		Env: planEnvOf(j.Env), Timeout: dur(j.Timeout), OnAgentLost: j.OnAgentLost, Checkout: j.Checkout,
		Resources: planAmountOf(j.Resources)}
	if j.TimeoutExpr != nil {
		out.Timeout = j.TimeoutExpr.Source()
	}
	for _, n := range j.Needs {
		out.Needs = append(out.Needs, planNeed(n))
	}
	if m := j.Matrix; m != nil {
		out.Matrix = &planMatrix{Keys: m.Keys, Values: m.Values, Include: kvLists(m.Include), Exclude: kvLists(m.Exclude), MaxParallel: m.MaxParallel, FailFast: m.FailFast}
	}
	for _, v := range j.Variants {
		out.Variants = append(out.Variants, planVariant{Name: v.Name, Values: v.Values})
	}
	for _, s := range j.Steps {
		out.Steps = append(out.Steps, planStep{Index: s.Index, Line: s.Pos.Line, Name: s.Name, Run: textSource(s.Run), Shell: s.Shell,
			If: condSource(s.If), Env: planEnvOf(s.Env), WorkingDirectory: textSource(s.WorkingDirectory), Timeout: dur(s.Timeout),
			Retry:           planRetry{MaxAttempts: s.Retry.MaxAttempts, Delay: dur(s.Retry.Delay), Backoff: s.Retry.Backoff, MaxDelay: dur(s.Retry.MaxDelay)},
			ContinueOnError: s.ContinueOnError})
	}
	return out
}

func planEnvOf(env []EnvVar) []planEnv {
	var out []planEnv
	for _, e := range env {
		out = append(out, planEnv{Name: e.Name, Value: textSource(e.Value)})
	}
	return out
}

func sources(ts []*expr.Template) []string {
	var out []string
	for _, t := range ts {
		out = append(out, textSource(t))
	}
	return out
}

func dur(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func textSource(t *expr.Template) string {
	if t == nil {
		return ""
	}
	return t.Source()
}

func condSource(c *expr.Expr) string {
	if c == nil {
		return ""
	}
	return c.String()
}

// kvList renders ordered key/value pairs as one JSON object, keys in order.
type kvList []KV

func (l kvList) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range l {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.Key)
		v, _ := json.Marshal(kv.Value)
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func kvLists(ls [][]KV) []kvList {
	out := make([]kvList, len(ls))
	for i, l := range ls {
		out[i] = l
	}
	return out
}
