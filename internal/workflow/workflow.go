package workflow

import (
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strings"
	"time"
	"unicode"

	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// Workflow is the validated, normalized plan of one workflow file. It is
// never modified after Parse returns it.
type Workflow struct {
	// File is the path the workflow was parsed from, as given to Parse
	// (LoadDir gives it relative to the repository root, with slashes).
	File string
	// Name defaults to the file name without its extension.
	Name string
	// Hash is "sha256:" and the hex SHA-256 of the exact file bytes, so a run
	// records exactly which definition it executed.
	Hash string
	On   Triggers
	// Env is the workflow-level environment, in the order written; values are
	// rendered when the run is created.
	Env []EnvVar
	// Timeout bounds the whole run (enforced by the orchestrator); 0: none.
	Timeout time.Duration
	// Concurrency is parsed but not supported yet (always nil in a valid plan).
	Concurrency *Concurrency
	// Jobs in file order.
	Jobs []*Job

	jobs map[string]*Job
}

// Job returns the job with the given id, or nil.
func (w *Workflow) Job(id string) *Job { return w.jobs[id] }

// Pos is a position in the workflow file, for messages that point back at it.
type Pos struct {
	Line int
	Col  int
}

func posOf(n *yaml.Node) Pos { return Pos{Line: n.Line, Col: n.Column} }

// Concurrency groups runs (not supported yet).
type Concurrency struct {
	Group            *expr.Template
	CancelInProgress bool
}

// Limits on the shape of a workflow.
const (
	// MaxJobs bounds the jobs a workflow defines.
	MaxJobs = 256
	// MaxExpandedJobs bounds the jobs a workflow expands to, counting every
	// matrix child, so one file cannot create an unbounded run.
	MaxExpandedJobs = 1024
	// MaxEnv bounds the variables of one env: mapping.
	MaxEnv = 200
)

// Hash returns the content hash of a workflow file's bytes.
func Hash(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Parse validates one workflow file and returns its plan. The error, when
// not nil, is an ErrorList holding every problem found in the file; the
// workflow is then nil. file is used in error messages and for the default
// name.
func Parse(file string, data []byte) (*Workflow, error) {
	p := newParser(file, data)
	root := p.decode()
	if root == nil {
		return nil, p.errs.sort()
	}
	w := p.parseWorkflow(root)
	if len(p.errs) > 0 {
		return nil, p.errs.sort()
	}
	return w, nil
}

func (p *parser) parseWorkflow(root *yaml.Node) *Workflow {
	w := &Workflow{File: p.file, Hash: Hash(p.data), Name: defaultName(p.file), jobs: map[string]*Job{}}
	pairs, _ := p.mapping(root, "the workflow")
	f := p.fields(pairs, "the workflow", workflowKeys)
	if pr, ok := f["name"]; ok {
		if s, good := p.str(pr.v, "name"); good {
			if msg := nameProblem(s); msg != "" {
				p.errorf(pr.v, "name: %s", msg)
			}
			w.Name = s
		}
	}
	if pr, ok := f["on"]; ok {
		w.On = p.parseOn(pr.v)
	} else {
		p.errorAt(1, 1, "on: is missing; without triggers the workflow never runs (use on: dispatch for manual runs only)")
	}
	if pr, ok := f["env"]; ok {
		w.Env = p.parseEnv(pr.v, "env", LocWorkflowEnv, nil)
	}
	if pr, ok := f["timeout"]; ok {
		w.Timeout, _ = p.duration(pr.v, "timeout")
	}
	if pr, ok := f["concurrency"]; ok {
		w.Concurrency = p.parseConcurrency(pr)
	}
	if pr, ok := f["approval"]; ok {
		p.notSupported(pr)
	}
	if pr, ok := f["jobs"]; ok {
		p.parseJobs(w, pr.v)
	} else {
		p.errorAt(1, 1, "jobs: is missing; a workflow needs at least one job")
	}
	p.w = w
	p.checkExpressions()
	return w
}

// defaultName is the file name without directory and extension.
// DefaultName is the name of a workflow whose file sets none: the file's
// base name without its extension.
func DefaultName(file string) string { return defaultName(file) }

func defaultName(file string) string {
	base := path.Base(strings.ReplaceAll(file, "\\", "/"))
	if ext := path.Ext(base); ext != "" && ext != base {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

// nameProblem checks a workflow name: short, one line, printable.
func nameProblem(s string) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "the name is empty"
	case len(s) > MaxIDLen:
		return "the name is longer than 100 characters"
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return "the name must be one line of printable characters"
		}
	}
	return ""
}

func (p *parser) parseConcurrency(pr pair) *Concurrency {
	c := &Concurrency{}
	pairs, _ := p.mapping(pr.v, "concurrency")
	f := p.fields(pairs, "concurrency", concurrencyKeys)
	if g, ok := f["group"]; ok {
		c.Group = p.text(g.v, "concurrency.group", LocConcurrencyGroup, nil)
	}
	if ci, ok := f["cancel_in_progress"]; ok {
		c.CancelInProgress, _ = p.boolean(ci.v, "cancel_in_progress")
	}
	p.notSupported(pr)
	return c
}

// notSupported reports a key kiln recognises but does not implement yet.
func (p *parser) notSupported(pr pair) {
	if why, ok := notYet[pr.key]; ok {
		p.errorf(pr.k, "`%s` is not supported yet: %s", pr.key, why)
	}
}

// EnvVar is one environment variable; its value may hold expressions.
type EnvVar struct {
	Name  string
	Value *expr.Template
}

// parseEnv reads an env: mapping of variable names to scalar values.
func (p *parser) parseEnv(n *yaml.Node, key string, loc Location, job *Job) []EnvVar {
	pairs, _ := p.mapping(n, key)
	if len(pairs) > MaxEnv {
		p.errorf(n, "%s: %d variables; at most %d", key, len(pairs), MaxEnv)
		return nil
	}
	out := make([]EnvVar, 0, len(pairs))
	for _, pr := range pairs {
		switch {
		case !envNameRE.MatchString(pr.key) || len(pr.key) > MaxIDLen:
			p.errorf(pr.k, "%s: %q is not a valid variable name (letters, digits and _, not starting with a digit)", key, pr.key)
			continue
		case strings.HasPrefix(strings.ToUpper(pr.key), "KILN_"):
			p.errorf(pr.k, "%s: variables starting with KILN_ are reserved for kiln", key)
			continue
		case isNull(pr.v):
			out = append(out, EnvVar{Name: pr.key, Value: p.text(&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Line: pr.v.Line, Column: pr.v.Column}, key, loc, job)})
			continue
		case pr.v.Kind != yaml.ScalarNode:
			p.errorf(pr.v, "%s: the value of %s must be a string, not %s", key, pr.key, describe(pr.v))
			continue
		}
		out = append(out, EnvVar{Name: pr.key, Value: p.text(pr.v, key+"."+pr.key, loc, job)})
	}
	return out
}
