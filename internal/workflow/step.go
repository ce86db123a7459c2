package workflow

import (
	"fmt"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/kilnci/kiln/internal/expr"
	yaml "go.yaml.in/yaml/v3"
)

// Step is one shell script of a job.
type Step struct {
	// Index is the step's 0-based position in its job.
	Index int
	Pos   Pos
	// Name defaults to "Run " and the first line of the script.
	Name string
	// Run is the script. The agent never pastes an expression's value into
	// it: each ${{ }} becomes a reference to an environment variable holding
	// the value.
	Run *expr.Template
	// Shell is "sh" (the default) or "bash"; ShellArgs gives the command.
	Shell string
	// If is the step's condition; nil means success().
	If               *expr.Expr
	Env              []EnvVar
	WorkingDirectory *expr.Template // relative to the workspace; nil: the workspace
	// Timeout bounds each attempt of the step; default DefaultStepTimeout.
	Timeout         time.Duration
	Retry           Retry
	ContinueOnError bool
}

// Defaults and limits of steps.
const (
	DefaultStepTimeout = 30 * time.Minute
	DefaultShell       = "sh"
	MaxSteps           = 256
	MaxRetryAttempts   = 10
)

// shells maps each accepted shell to the command that runs a script file
// (the script's path is appended): errexit everywhere, pipefail where the
// shell has it, no profile files.
var shells = map[string][]string{
	"sh":   {"sh", "-e"},
	"bash": {"bash", "--noprofile", "--norc", "-e", "-o", "pipefail"},
}

// ShellArgs returns the command line (without the script path) for a
// step's shell, or nil for an unknown shell.
func ShellArgs(shell string) []string {
	if args, ok := shells[shell]; ok {
		return append([]string(nil), args...)
	}
	return nil
}

// Retry is a step's retry policy. MaxAttempts 1 means no retry.
type Retry struct {
	MaxAttempts int
	Delay       time.Duration
	Backoff     string // "fixed" or "exponential"
	MaxDelay    time.Duration
}

// Backoff kinds.
const (
	BackoffFixed       = "fixed"
	BackoffExponential = "exponential"
)

// DefaultRetry is what `retry: N` means besides its attempt count.
var DefaultRetry = Retry{Delay: time.Second, Backoff: BackoffExponential, MaxDelay: 30 * time.Second}

// Wait returns how long to wait after failed attempt n (1-based) before the
// next: Delay for fixed backoff; min(Delay·2^(n-1), MaxDelay) for
// exponential.
func (r Retry) Wait(n int) time.Duration {
	if r.Backoff != BackoffExponential {
		return r.Delay
	}
	d := r.Delay
	for i := 1; i < n && d < r.MaxDelay; i++ {
		d *= 2
	}
	return min(d, r.MaxDelay)
}

func (p *parser) parseSteps(n *yaml.Node, j *Job) []*Step {
	if n.Kind != yaml.SequenceNode {
		p.errorf(n, "steps: expected a list of steps, found %s", describe(n))
		return nil
	}
	if len(n.Content) == 0 {
		p.errorf(n, "steps: the list is empty; a job needs at least one step")
		return nil
	}
	if len(n.Content) > MaxSteps {
		p.errorf(n, "steps: %d steps; a job may have at most %d", len(n.Content), MaxSteps)
		return nil
	}
	out := make([]*Step, 0, len(n.Content))
	for i, it := range n.Content {
		if s := p.parseStep(it, i, j); s != nil {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) parseStep(n *yaml.Node, i int, j *Job) *Step {
	what := fmt.Sprintf("step %d of job %q", i+1, j.ID)
	if n.Kind == yaml.ScalarNode && !isNull(n) {
		p.errorf(n, "%s is a string; write it as - run: %s", what, firstLine(n.Value))
		return nil
	}
	pairs, ok := p.mapping(n, what)
	if !ok {
		return nil
	}
	f := p.fields(pairs, what, stepKeys)
	s := &Step{Index: i, Pos: posOf(n), Shell: DefaultShell, Timeout: DefaultStepTimeout, Retry: Retry{MaxAttempts: 1}}
	if x, has := f["run"]; has {
		if src, good := p.str(x.v, "run"); good {
			if strings.TrimSpace(src) == "" {
				p.errorf(x.v, "run: the script is empty")
			}
			s.Run = p.text(x.v, "run", LocStep, j)
			s.Name = "Run " + firstLine(src)
		}
	} else {
		p.errorf(n, "%s needs run: (the script to run)", what)
	}
	if x, has := f["name"]; has {
		if name, good := p.str(x.v, "name"); good {
			if msg := nameProblem(name); msg != "" {
				p.errorf(x.v, "name: %s", msg)
			}
			s.Name = name
		}
	}
	if x, has := f["shell"]; has {
		if sh, good := p.str(x.v, "shell"); good {
			if _, known := shells[sh]; !known {
				p.errorf(x.v, "shell: %q is not supported; use sh or bash", sh)
			}
			s.Shell = sh
		}
	}
	if x, has := f["if"]; has {
		s.If = p.cond(x.v, "if", LocStepIf, j)
	}
	if x, has := f["env"]; has {
		s.Env = p.parseEnv(x.v, "env", LocStep, j)
	}
	if x, has := f["working_directory"]; has {
		s.WorkingDirectory = p.workdir(x.v, j)
	}
	if x, has := f["timeout"]; has {
		if d, good := p.duration(x.v, "timeout"); good {
			s.Timeout = d
		}
	}
	if x, has := f["retry"]; has {
		s.Retry = p.parseRetry(x.v)
	}
	if x, has := f["continue_on_error"]; has {
		s.ContinueOnError, _ = p.boolean(x.v, "continue_on_error")
	}
	return s
}

// firstLine is the first non-blank line of a script, shortened for a name.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if utf8.RuneCountInString(l) > 60 {
				r := []rune(l)
				return string(r[:60]) + "…"
			}
			return l
		}
	}
	return ""
}

// workdir reads working_directory: a path inside the workspace.
func (p *parser) workdir(n *yaml.Node, j *Job) *expr.Template {
	s, ok := p.str(n, "working_directory")
	if !ok {
		return nil
	}
	if !strings.Contains(s, "${{") {
		clean := path.Clean(s)
		if path.IsAbs(s) || clean == ".." || strings.HasPrefix(clean, "../") {
			p.errorf(n, "working_directory: %q is outside the workspace; use a path relative to the repository root", s)
		}
	}
	return p.text(n, "working_directory", LocStep, j)
}

// parseRetry reads `retry: N` or the full mapping.
func (p *parser) parseRetry(n *yaml.Node) Retry {
	r := DefaultRetry
	r.MaxAttempts = 1
	if n.Kind == yaml.ScalarNode {
		if v, ok := p.integer(n, "retry", 1, MaxRetryAttempts); ok {
			r.MaxAttempts = v
		}
		return r
	}
	pairs, ok := p.mapping(n, "retry")
	if !ok {
		return r
	}
	f := p.fields(pairs, "retry", retryKeys)
	if x, has := f["max_attempts"]; has {
		if v, good := p.integer(x.v, "max_attempts", 1, MaxRetryAttempts); good {
			r.MaxAttempts = v
		}
	} else {
		p.errorf(n, "retry: max_attempts: is missing")
	}
	if x, has := f["delay"]; has {
		if d, good := p.duration(x.v, "delay"); good {
			r.Delay = d
		}
	}
	if x, has := f["backoff"]; has {
		if b, good := p.str(x.v, "backoff"); good {
			if b != BackoffFixed && b != BackoffExponential {
				p.errorf(x.v, "backoff: %q is not a backoff; use fixed or exponential", b)
			}
			r.Backoff = b
		}
	}
	if r.MaxDelay < r.Delay {
		r.MaxDelay = r.Delay // a long delay without max_delay is simply fixed
	}
	if x, has := f["max_delay"]; has {
		if d, good := p.duration(x.v, "max_delay"); good {
			r.MaxDelay = d
			if d < r.Delay {
				p.errorf(x.v, "max_delay: %s is shorter than delay (%s)", d, r.Delay)
			}
		}
	}
	return r
}
