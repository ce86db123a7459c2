package api

import (
	"encoding/json"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// The types below are the JSON the API answers and accepts; the Client
// returns them. Times are RFC 3339 in UTC; a time that has not happened yet
// is absent rather than zero.

// Run is a run. List answers leave out Event, Inputs, Trace and Jobs.
type Run struct {
	ID            string          `json:"id"`
	Number        int64           `json:"number"`
	Source        string          `json:"source,omitempty"` // the source's name
	Repository    string          `json:"repository,omitempty"`
	Workflow      string          `json:"workflow"`
	WorkflowFile  string          `json:"workflow_file,omitempty"`
	Trigger       kiln.EventName  `json:"trigger,omitempty"` // push, pull_request, tag, schedule, dispatch
	Actor         string          `json:"actor,omitempty"`
	Ref           string          `json:"ref,omitempty"`
	SHA           string          `json:"sha,omitempty"`
	Status        kiln.RunStatus  `json:"status"`
	CancelReason  string          `json:"cancel_reason,omitempty"`
	FailureReason string          `json:"failure_reason,omitempty"`
	RerunOf       string          `json:"rerun_of,omitempty"`
	ParentRunID   string          `json:"parent_run_id,omitempty"`
	DeliveryID    int64           `json:"delivery_id,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	StartedAt     *time.Time      `json:"started_at,omitempty"`
	FinishedAt    *time.Time      `json:"finished_at,omitempty"`
	Deadline      *time.Time      `json:"deadline,omitempty"`
	Event         json.RawMessage `json:"event,omitempty"`  // the normalized event
	Inputs        json.RawMessage `json:"inputs,omitempty"` // dispatch inputs
	Trace         json.RawMessage `json:"trace,omitempty"`  // the trigger decision
	// Fork is set when the run is a fork pull request's: where its code
	// comes from and who wrote it.
	Fork *kiln.Fork `json:"fork,omitempty"`
	// Approval is set when the run was held for an admin's approval.
	Approval *Approval `json:"approval,omitempty"`
	Jobs     []Job     `json:"jobs,omitempty"`

	// ReportNote says why the run's report to its forge fell back: GitHub
	// refused its check run and a commit status was posted instead.
	ReportNote string `json:"report_note,omitempty"`
}

// Approval is the hold of a fork's run: waiting (its jobs held pending),
// approved (by whom, when), or rejected (cancelled while it waited).
type Approval struct {
	State      string     `json:"state"` // waiting, approved or rejected
	Reason     string     `json:"reason"`
	ApprovedBy string     `json:"approved_by,omitempty"` // the admin token's name
	ApprovedAt *time.Time `json:"approved_at,omitempty"`
}

// Approval states.
const (
	ApprovalWaiting  = "waiting"
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
)

func approvalDTO(r store.Run) *Approval {
	a := r.Approval
	if a == nil {
		return nil
	}
	out := &Approval{Reason: a.Reason, ApprovedBy: a.ApprovedBy, ApprovedAt: tp(a.ApprovedAt)}
	switch {
	case !a.Waiting():
		out.State = ApprovalApproved
	case r.Status.Terminal() || r.Status == kiln.RunCancelling:
		out.State = ApprovalRejected
	default:
		out.State = ApprovalWaiting
	}
	return out
}

// Job is a job of a run with its steps.
type Job struct {
	ID                    string            `json:"id"`
	Name                  string            `json:"name"`
	Base                  string            `json:"base,omitempty"` // the workflow's job id, for matrix children
	Matrix                json.RawMessage   `json:"matrix,omitempty"`
	Status                kiln.JobStatus    `json:"status"`
	Result                kiln.Result       `json:"result,omitempty"`
	Error                 string            `json:"error,omitempty"`
	Needs                 []Need            `json:"needs,omitempty"`
	RunsOn                kiln.Labels       `json:"runs_on"`
	ExcludeLabels         kiln.Labels       `json:"exclude_labels,omitempty"`
	AgentID               string            `json:"agent_id,omitempty"`
	Attempt               int64             `json:"attempt,omitempty"` // the lease epoch; logs are kept per attempt
	Dispatches            int               `json:"dispatches,omitempty"`
	PendingReason         string            `json:"pending_reason,omitempty"`
	PendingSince          *time.Time        `json:"pending_since,omitempty"`
	LastProvisioningError string            `json:"last_provisioning_error,omitempty"`
	QueuedAt              *time.Time        `json:"queued_at,omitempty"`
	DispatchedAt          *time.Time        `json:"dispatched_at,omitempty"`
	StartedAt             *time.Time        `json:"started_at,omitempty"`
	FinishedAt            *time.Time        `json:"finished_at,omitempty"`
	Outputs               map[string]string `json:"outputs,omitempty"`
	Steps                 []Step            `json:"steps"`
}

// Need is one entry of a job's needs.
type Need struct {
	Job    string        `json:"job"`
	Accept []kiln.Result `json:"accept"`
}

// Step is a step of a job.
type Step struct {
	Index      int             `json:"index"`
	Name       string          `json:"name"`
	Status     kiln.StepStatus `json:"status"`
	ExitCode   *int            `json:"exit_code,omitempty"`
	Error      string          `json:"error,omitempty"`
	StartedAt  *time.Time      `json:"started_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

// RunList is a page of runs, newest first. NextBefore, when set, is the
// before= value of the next page.
type RunList struct {
	Runs       []Run `json:"runs"`
	NextBefore int64 `json:"next_before,omitempty"`
}

// CancelRequest is the optional body of POST /runs/{run}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// CancelResult says what a cancel did: Forced is false for the first,
// graceful request and true for a second one that ended the run at once.
type CancelResult struct {
	Forced bool `json:"forced"`
	Run    Run  `json:"run"`
}

// RerunRequest is the optional body of POST /runs/{run}/rerun.
type RerunRequest struct {
	// FailedOnly reruns the failed and cancelled jobs and their dependents,
	// reusing the results of the rest.
	FailedOnly bool `json:"failed_only"`
}

// LogLine is one line of a step's log, as the log endpoint streams it.
type LogLine struct {
	Job      string `json:"job"`
	JobID    string `json:"job_id"`
	Attempt  int64  `json:"attempt"`
	Step     int    `json:"step"` // -1 is the checkout
	StepName string `json:"step_name,omitempty"`
	Seq      uint64 `json:"seq"`
	Stream   string `json:"stream"`
	Text     string `json:"text"`
	TimeMS   int64  `json:"time_ms"`
}

func tp(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// runDTO converts a stored run; full adds the event, inputs, trace and jobs.
func runDTO(r store.Run, sourceName string, full bool) Run {
	out := Run{
		ID: r.ID, Number: r.Number, Source: sourceName, Repository: r.Repository, Workflow: r.Workflow,
		WorkflowFile: r.WorkflowFile, Ref: r.Ref, SHA: r.SHA, Status: r.Status,
		CancelReason: r.CancelReason, FailureReason: r.FailureReason, ReportNote: r.ReportNote, RerunOf: r.RerunOf,
		ParentRunID: r.ParentRunID, DeliveryID: r.DeliveryID, CreatedAt: r.CreatedAt.UTC(),
		StartedAt: tp(r.StartedAt), FinishedAt: tp(r.FinishedAt), Deadline: tp(r.Deadline),
	}
	var ev struct {
		Name  kiln.EventName `json:"name"`
		Actor string         `json:"actor"`
		Fork  *kiln.Fork     `json:"fork"`
	}
	if json.Unmarshal(r.Event, &ev) == nil {
		out.Trigger, out.Actor, out.Fork = ev.Name, ev.Actor, ev.Fork
	}
	out.Approval = approvalDTO(r)
	if !full {
		return out
	}
	out.Event, out.Inputs, out.Trace = rawOrNil(r.Event), rawOrNil(r.Inputs), rawOrNil(r.Trace)
	out.Jobs = make([]Job, len(r.Jobs))
	for i, j := range r.Jobs {
		out.Jobs[i] = jobDTO(j)
	}
	return out
}

func jobDTO(j store.Job) Job {
	out := Job{
		ID: j.ID, Name: j.Name, Matrix: rawOrNil(j.Matrix), Status: j.Status, Result: j.Result, Error: j.Error,
		RunsOn: orEmptyLabels(j.Requirement.RunsOn), ExcludeLabels: j.Requirement.Exclude,
		AgentID: j.AgentID, Attempt: j.LeaseEpoch, Dispatches: j.Attempts,
		LastProvisioningError: j.LastProvisioningError, QueuedAt: tp(j.QueuedAt),
		DispatchedAt: tp(j.DispatchedAt), StartedAt: tp(j.StartedAt), FinishedAt: tp(j.FinishedAt),
		Outputs: j.Outputs, Steps: make([]Step, len(j.Steps)),
	}
	if j.Base != j.Name {
		out.Base = j.Base
	}
	if waiting(j.Status) {
		out.PendingReason, out.PendingSince = j.PendingReason, tp(j.PendingSince)
	}
	for _, n := range j.Needs {
		out.Needs = append(out.Needs, Need{Job: n.Job, Accept: n.Accept})
	}
	for i, s := range j.Steps {
		out.Steps[i] = Step{Index: s.Index, Name: s.Name, Status: s.Status, ExitCode: s.ExitCode, Error: s.Error,
			StartedAt: tp(s.StartedAt), FinishedAt: tp(s.FinishedAt)}
	}
	return out
}

// waiting reports whether a job in status s has a pending reason to show.
func waiting(s kiln.JobStatus) bool { return s == kiln.JobPending || s == kiln.JobQueued }

// rawOrNil drops empty JSON values ({} or []) so they are left out.
func rawOrNil(v json.RawMessage) json.RawMessage {
	switch string(v) {
	case "", "{}", "[]", "null":
		return nil
	}
	return v
}

func orEmptyLabels(l kiln.Labels) kiln.Labels {
	if l == nil {
		return kiln.Labels{}
	}
	return l
}

// Source is a configured source with its secrets redacted.
type Source struct {
	forge.Source
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// ForkPullRequests is what the source does with pull requests from
	// forks (approve, run or deny); ForkLabels are the mandatory agent
	// labels their jobs may use.
	ForkPullRequests kiln.ForkPolicy `json:"fork_pull_requests"`
	ForkLabels       kiln.Labels     `json:"fork_labels"`
	// PublicBadges: anyone may fetch the source's status badges
	// (/badge/{source}/{workflow}.svg) without logging in.
	PublicBadges bool `json:"public_badges"`
	// Warnings, in the answer to a create or an update, say where the
	// source's credentials put agents at risk or leave them without access.
	Warnings []string `json:"warnings,omitempty"`
}

// SourceRequest creates a source: its forge settings, its fork policy
// (default approve, no fork labels) and whether its status badges are
// public (default not).
type SourceRequest struct {
	forge.Source
	ForkPullRequests kiln.ForkPolicy `json:"fork_pull_requests,omitempty"`
	ForkLabels       []string        `json:"fork_labels,omitempty"`
	PublicBadges     bool            `json:"public_badges,omitempty"`
}

// Hook is the post-receive hook of a local source.
type Hook struct {
	Source string `json:"source"`
	Path   string `json:"path"` // the repository's path on the server's host
	Script string `json:"script"`
}
