package executor

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Job is one job as the executor runs it. Callers build it from their own
// representation (the agent from the dispatch message, `kiln run` from the
// workflow plan); every value is already final except the step fields that
// are templates (Step.If, Step.Env values, Step.Run, Step.WorkingDirectory),
// which the executor evaluates before each step because they may read the
// job's status and the environment earlier steps set.
type Job struct {
	RunID, JobID, Name string

	Checkout *Checkout // nil: no checkout (`checkout: false`); the workspace starts empty

	WorkflowEnv, JobEnv map[string]string // layered workflow → job → $KILN_ENV → step
	Steps               []Step

	// Contexts are the expression contexts steps may read (event, inputs,
	// run, matrix, needs …) as JSON-shaped values. The executor adds `env`
	// and `job` ({status}).
	Contexts map[string]any

	// Secrets are masked in every log line. Their names are not used yet.
	Secrets map[string]string

	// Artifacts are uploaded after the steps through Transfer, and the
	// needs' artifacts fetched through it before the first step (nil: no
	// artifacts either way).
	Artifacts []Artifact
	Transfer  Transfer
	// Caches are restored through Transfer (when it is a CacheTransfer)
	// after the checkout and saved after the steps when the job succeeded.
	Caches []Cache

	Timeout       time.Duration // the whole job, checkout included; 0 = none
	KeepWorkspace bool          // keep the workspace after the job (Result.Workspace)
}

// Step is one `run:` step.
type Step struct {
	Name  string
	Run   string // the script; `${{ }}` become environment variable references
	Shell string // "" or "sh", "bash", or a command line with {0} for the script path
	If    string // "" means success()

	Env              map[string]string // values are templates
	WorkingDirectory string            // a template; relative to the workspace
	Timeout          time.Duration     // per attempt; 0 = Config.DefaultStepTimeout
	Retry            Retry
	ContinueOnError  bool
}

// Retry says how often a failing step is run again.
type Retry struct {
	MaxAttempts int           // attempts in all; 0 or 1 = no retry
	Delay       time.Duration // wait before the second attempt
	MaxDelay    time.Duration // cap for exponential backoff; 0 = no cap
	Backoff     string        // BackoffFixed ("" too) or BackoffExponential
}

// Retry backoff kinds.
const (
	BackoffFixed       = "fixed"
	BackoffExponential = "exponential"
)

// wait is how long to wait before attempt n+1 after attempt n (n ≥ 1)
// failed: Delay for fixed backoff, min(Delay·2^(n-1), MaxDelay) for
// exponential.
func (r Retry) wait(n int) time.Duration {
	if r.Backoff != BackoffExponential {
		return r.Delay
	}
	d := r.Delay
	for i := 1; i < n; i++ {
		if r.MaxDelay > 0 && d >= r.MaxDelay || d > time.Duration(1<<62) {
			break
		}
		d *= 2
	}
	if r.MaxDelay > 0 && d > r.MaxDelay {
		d = r.MaxDelay
	}
	return d
}

func (r Retry) attempts() int {
	if r.MaxAttempts < 1 {
		return 1
	}
	return r.MaxAttempts
}

// Checkout says what to put in the workspace before the first step.
type Checkout struct {
	// URL is the clone URL: https://, http://, ssh://, git@host:path or
	// file://. SHA is the commit to check out (HEAD is verified against
	// it); with no SHA, Ref's tip is checked out.
	URL, Ref, SHA string
	// Depth is the fetch depth: 0 means 1, a negative value the full history.
	Depth int

	// LocalPath, instead of URL, is a local working tree copied as it is:
	// HEAD checked out, then uncommitted changes, untracked files that are
	// not ignored, and deletions applied on top (`kiln run`).
	LocalPath string

	Auth *GitAuth
	// Hint, when set, follows the error of a failed checkout: how to give
	// kiln the credentials it lacked (the server sends one with an
	// anonymous clone).
	Hint string
}

// GitAuth are the credentials git uses to fetch. They reach git only
// through its environment and temporary files private to the job, never a
// URL, an argument or a log line.
type GitAuth struct {
	Username string // for HTTP(S); "" means "x-access-token"
	Password string // password or token for HTTP(S)
	SSHKey   []byte // a private key for ssh:// and git@host:path URLs
	// KnownHosts pins the SSH host keys (known_hosts format). Without it
	// ssh uses the agent user's known_hosts and refuses unknown hosts.
	KnownHosts []byte
}

var (
	shaPattern    = regexp.MustCompile(`^([0-9a-fA-F]{40}|[0-9a-fA-F]{64})$`)
	envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// validate checks what the executor relies on; the orchestrator validated
// the workflow already, so these are plain sentences for a caller's bug or
// a hostile message.
func (j *Job) validate() error {
	for k := range j.WorkflowEnv {
		if !envKeyPattern.MatchString(k) {
			return fmt.Errorf("workflow env name %q is not a valid environment variable name", k)
		}
	}
	for k := range j.JobEnv {
		if !envKeyPattern.MatchString(k) {
			return fmt.Errorf("job env name %q is not a valid environment variable name", k)
		}
	}
	if j.Timeout < 0 {
		return fmt.Errorf("job timeout %s is negative", j.Timeout)
	}
	if c := j.Checkout; c != nil {
		if err := c.validate(); err != nil {
			return err
		}
	}
	for i := range j.Steps {
		if err := j.Steps[i].validate(); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, j.Steps[i].displayName(i), err)
		}
	}
	return nil
}

func (s *Step) validate() error {
	if strings.TrimSpace(s.Run) == "" {
		return fmt.Errorf("run is empty")
	}
	for k := range s.Env {
		if !envKeyPattern.MatchString(k) {
			return fmt.Errorf("env name %q is not a valid environment variable name", k)
		}
	}
	if s.Timeout < 0 {
		return fmt.Errorf("timeout %s is negative", s.Timeout)
	}
	r := s.Retry
	if r.MaxAttempts < 0 || r.Delay < 0 || r.MaxDelay < 0 {
		return fmt.Errorf("retry values must not be negative")
	}
	if r.Backoff != "" && r.Backoff != BackoffFixed && r.Backoff != BackoffExponential {
		return fmt.Errorf("retry backoff %q is not %q or %q", r.Backoff, BackoffFixed, BackoffExponential)
	}
	return nil
}

// displayName is the step's name or, as the workflow package names an
// unnamed step, "Run " and its first script line.
func (s *Step) displayName(i int) string {
	if s.Name != "" {
		return s.Name
	}
	line, _, _ := strings.Cut(strings.TrimSpace(s.Run), "\n")
	if line == "" {
		return fmt.Sprintf("step %d", i+1)
	}
	if len(line) > 60 {
		line = line[:57] + "..."
	}
	return "Run " + line
}

func (c *Checkout) validate() error {
	switch {
	case c.URL != "" && c.LocalPath != "":
		return fmt.Errorf("checkout names both a URL and a local path")
	case c.URL == "" && c.LocalPath == "":
		return fmt.Errorf("checkout names neither a URL nor a local path")
	case c.LocalPath != "":
		return nil
	}
	if strings.HasPrefix(c.URL, "-") || strings.ContainsAny(c.URL, "\x00\n\r") {
		return fmt.Errorf("checkout URL %q is not valid", c.URL)
	}
	if c.SHA != "" && !shaPattern.MatchString(c.SHA) {
		return fmt.Errorf("checkout commit %q is not a full hexadecimal commit id", c.SHA)
	}
	if c.Ref != "" && !validRef(c.Ref) {
		return fmt.Errorf("checkout ref %q is not a valid git ref", c.Ref)
	}
	if c.SHA == "" && c.Ref == "" {
		return fmt.Errorf("checkout names neither a commit nor a ref")
	}
	return nil
}

// validRef accepts what `git check-ref-format` would and never something
// git could read as an option.
func validRef(ref string) bool {
	if ref == "" || strings.HasPrefix(ref, "-") || strings.HasPrefix(ref, "/") ||
		strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".") ||
		strings.HasSuffix(ref, ".lock") || strings.Contains(ref, "..") ||
		strings.Contains(ref, "//") || strings.Contains(ref, "@{") {
		return false
	}
	for _, r := range ref {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	return true
}
