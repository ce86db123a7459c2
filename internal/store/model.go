package store

import (
	"encoding/json"
	"time"

	"github.com/kilnci/kiln"
)

// OnAgentLost is what happens to a started job whose agent was lost and did
// not come back within the recovery window.
type OnAgentLost string

const (
	// AgentLostRetry requeues the job once; a second loss ends it agent_lost.
	AgentLostRetry OnAgentLost = "retry"
	// AgentLostFail ends the job agent_lost at once.
	AgentLostFail OnAgentLost = "fail"
)

// NewRun is a run to create with all its jobs in one transaction.
type NewRun struct {
	Source       string // the source (forge connection) the event came from
	Repository   string // owner/name
	Workflow     string // the workflow's name
	WorkflowFile string // e.g. .kiln/workflows/ci.yml
	// WorkflowHash is the content hash of the workflow file; WorkflowContent,
	// when given, is kept once per hash in workflow_definitions for reruns.
	WorkflowHash    string
	WorkflowContent []byte
	Event           json.RawMessage // the normalized event (kiln.Event)
	Inputs          json.RawMessage // dispatch inputs
	Trace           json.RawMessage // the trigger decision trace
	Ref, SHA        string
	// Timeout is the workflow's run timeout; the run's deadline is creation
	// time plus Timeout (0: none). Runs().Overdue lists runs past it.
	Timeout     time.Duration
	ParentRunID string // the run that triggered this one, if any
	RerunOf     string // the run this one reruns, if any
	DeliveryID  int64  // the event-log row of the webhook delivery, if any
	// Hold, when set, is why the run waits for an admin's approval (a pull
	// request from a fork): its jobs are created pending with Hold as
	// their reason and none is released until Runs().Approve. Held jobs
	// are in no queue, so neither queue expiry nor the unroutable probe
	// sees them; the run's timeout counts from the approval.
	Hold string
	Jobs []NewJob
}

// NewJob is one job of a new run: a plain job, or one child of a matrix.
type NewJob struct {
	// Name is unique in the run: "lint", or a matrix child "test (1.26, sqlite)".
	Name string
	// Base is the workflow's job id ("test"); every child of a matrix shares
	// it. Needs name bases. Empty: Name.
	Base   string
	Matrix json.RawMessage // the child's matrix values
	// Needs are the groups this job waits for, each with the results it
	// accepts. A need on a matrix base waits for all its children.
	Needs []NeedEdge
	// MaxParallel bounds how many children of this job's group are past
	// pending and not finished at once (0: no bound). FailFast cancels the
	// group's other children when one fails. Both are the group's settings,
	// repeated on each child.
	MaxParallel int
	FailFast    bool
	OnAgentLost OnAgentLost // default AgentLostRetry
	// Requirement is what an agent must offer; the Releaser may replace it
	// when runs_on depends on expressions evaluated at release.
	Requirement kiln.Requirement
	Spec        json.RawMessage // opaque: what the engine sends an agent
	Steps       []string        // step names, in order
	// Reuse, when set, creates the job already finished with this result:
	// a rerun of only the failed jobs carries the others over unchanged.
	// Its dependents see it as finished from the start.
	Reuse *Reused
}

// Reused is the carried-over result of a job in a partial rerun.
type Reused struct {
	Status  kiln.JobStatus // a terminal status
	Outputs map[string]string
	Error   string
}

// NeedEdge is one entry of a job's needs: a base job id and the results that
// satisfy it. Empty Accept means [success].
type NeedEdge struct {
	Job    string        `json:"job"`
	Accept []kiln.Result `json:"accept"`
}

// CreatedRun is what Runs().Create returns.
type CreatedRun struct {
	ID     string
	Number int64
	Jobs   map[string]string // job name → job id
	Effects
}

// Run is a stored run.
type Run struct {
	ID            string
	Number        int64
	Source        string
	Repository    string
	Workflow      string
	WorkflowFile  string
	WorkflowHash  string
	Event         json.RawMessage
	Inputs        json.RawMessage
	Trace         json.RawMessage
	Ref, SHA      string
	Status        kiln.RunStatus
	CancelReason  string // set once a cancel was requested
	FailureReason string
	Deadline      time.Time
	ParentRunID   string
	RerunOf       string
	DeliveryID    int64
	CreatedAt     time.Time
	StartedAt     time.Time
	FinishedAt    time.Time
	// Approval is set on a run that was held for an admin's approval.
	Approval *Approval
	// ReportNote says why the run's report to its forge fell back (GitHub
	// refused its check run; a commit status was posted instead).
	ReportNote string
	Jobs       []Job // filled by Runs().Get, not by List
}

// Approval is the hold of a run and its end: why it waited, and who let it
// run and when (zero while it waits, and for good when it was cancelled
// instead).
type Approval struct {
	Reason     string
	ApprovedBy string
	ApprovedAt time.Time
}

// Waiting reports whether the run still waits for its approval (and has not
// been cancelled instead: check the run's status).
func (a *Approval) Waiting() bool { return a != nil && a.ApprovedAt.IsZero() }

// Job is a stored job.
type Job struct {
	ID          string
	RunID       string
	Index       int // creation order in the run
	Name        string
	Base        string
	Matrix      json.RawMessage
	Status      kiln.JobStatus
	Result      kiln.Result // set once terminal
	Error       string      // why it failed, was skipped or cancelled
	Needs       []NeedEdge
	MaxParallel int
	FailFast    bool
	OnAgentLost OnAgentLost
	Spec        json.RawMessage
	Requirement kiln.Requirement
	// Stopped: a cancel reached the job; it is never queued again.
	Stopped bool
	// AgentID and LeaseEpoch name the current (or last) lease.
	AgentID               string
	LeaseEpoch            int64
	Attempts              int // dispatches so far
	PendingReason         string
	PendingSince          time.Time
	LastProvisioningError string
	QueuedAt              time.Time
	ExpiresAt             time.Time
	DispatchedAt          time.Time
	StartedAt             time.Time
	LastHeartbeatAt       time.Time
	FinishedAt            time.Time
	Outputs               map[string]string
	Steps                 []Step
}

// Step is a stored step of a job.
type Step struct {
	Index      int
	Name       string
	Status     kiln.StepStatus
	ExitCode   *int
	Error      string
	StartedAt  time.Time
	FinishedAt time.Time
}

// JobRef names a job and the status it reached.
type JobRef struct {
	ID     string
	RunID  string
	Name   string
	Status kiln.JobStatus
}

// CancelTarget is a job running on an agent that must be told to stop.
type CancelTarget struct {
	JobID   string
	RunID   string
	Name    string
	AgentID string
	Epoch   int64
}

// RunChange is a run whose status changed.
type RunChange struct {
	ID     string
	Number int64
	Status kiln.RunStatus
}

// Effects are the consequences an operation committed beyond the jobs it
// named: jobs released into the queue (wake agents), jobs that ended
// (including skip cascades), jobs on agents that must be cancelled
// (fail_fast, run cancel), and runs whose status changed.
type Effects struct {
	Queued   []JobRef
	Finished []JobRef
	Cancel   []CancelTarget
	Runs     []RunChange
}
