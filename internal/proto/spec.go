package proto

// JobSpec is everything an agent needs to run one job: the steps as the
// workflow wrote them (expressions in step fields are evaluated by the agent,
// per workflow.md), the environment the orchestrator already evaluated, the
// expression contexts, and where to get the code. The orchestrator stores the
// spec without its checkout and adds that, with the clone credentials, only
// in the frame it sends (EncodeDispatch): Checkout is the last field so the
// frame can be assembled from the stored bytes.
type JobSpec struct {
	Name        string            `json:"name"`
	Workflow    string            `json:"workflow"`
	WorkflowEnv map[string]string `json:"workflow_env,omitempty"`
	JobEnv      map[string]string `json:"job_env,omitempty"`
	Steps       []Step            `json:"steps"`
	// Contexts are the expression contexts (event, inputs, run, matrix,
	// needs) as JSON-shaped values.
	Contexts  map[string]any    `json:"contexts,omitempty"`
	Secrets   map[string]string `json:"secrets,omitempty"`
	TimeoutMS int64             `json:"timeout_ms,omitempty"`
	// Artifacts are uploaded after the steps, whatever the job's result,
	// through the orchestrator (never with storage credentials); the
	// artifacts of the job's direct needs are fetched before its first step.
	Artifacts []Artifact `json:"artifacts,omitempty"`
	// Caches are restored before the first step and saved after the last
	// when the job succeeded, through the orchestrator.
	Caches   []Cache   `json:"caches,omitempty"`
	Checkout *Checkout `json:"checkout,omitempty"` // nil: `checkout: false`; always last (EncodeDispatch)
}

// Artifact is a set of files a job uploads: Name is a template the agent
// renders with the step contexts; Paths are globs relative to the
// workspace ("!glob" excludes).
type Artifact struct {
	Name  string   `json:"name"`
	Paths []string `json:"paths"`
}

// Cache is a cache a job restores and saves: Key and RestoreKeys are
// templates the agent renders after the checkout; Paths are globs relative
// to the workspace ("!glob" excludes).
type Cache struct {
	Key         string   `json:"key"`
	Paths       []string `json:"paths"`
	RestoreKeys []string `json:"restore_keys,omitempty"`
}

// Checkout says where the job's code comes from.
type Checkout struct {
	URL       string   `json:"url,omitempty"`
	Ref       string   `json:"ref,omitempty"`
	SHA       string   `json:"sha,omitempty"`
	LocalPath string   `json:"local_path,omitempty"` // a working tree on the agent's host (kiln run)
	Auth      *GitAuth `json:"auth,omitempty"`
	// Hint is what the agent adds to the error of a failed checkout: how
	// to give kiln the credentials it lacked.
	Hint string `json:"hint,omitempty"`
}

// GitAuth are clone credentials; the agent hands them to git through its
// environment, never in a URL or an argument.
type GitAuth struct {
	Username   string `json:"username,omitempty"`
	Password   string `json:"password,omitempty"`
	SSHKey     string `json:"ssh_key,omitempty"`
	KnownHosts string `json:"known_hosts,omitempty"`
}

// Step is one step of the job.
type Step struct {
	Name             string            `json:"name"`
	Run              string            `json:"run"`
	Shell            string            `json:"shell,omitempty"`
	If               string            `json:"if,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	WorkingDirectory string            `json:"working_directory,omitempty"`
	TimeoutMS        int64             `json:"timeout_ms,omitempty"`
	Retry            *Retry            `json:"retry,omitempty"`
	ContinueOnError  bool              `json:"continue_on_error,omitempty"`
}

// Retry is a step's retry policy.
type Retry struct {
	MaxAttempts int    `json:"max_attempts"`
	DelayMS     int64  `json:"delay_ms,omitempty"`
	MaxDelayMS  int64  `json:"max_delay_ms,omitempty"`
	Backoff     string `json:"backoff,omitempty"` // fixed | exponential
}
