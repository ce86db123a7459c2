package kiln

// JobStatus is where a job stands inside the orchestrator. It is finer than
// the Result users see: several internal statuses (a stale heartbeat, a job
// nothing can run, a lost agent) are all a "failure" to a workflow author but
// mean different things to an operator.
type JobStatus string

const (
	// JobPending: created with its run, waiting for its needs (or for a
	// max_parallel wave) before the orchestrator evaluates its `if:`.
	JobPending JobStatus = "pending"
	// JobQueued: in the dispatch queue, waiting for an agent; it carries a
	// pending reason saying why it waits.
	JobQueued JobStatus = "queued"
	// JobDispatched: claimed by one agent under a lease epoch, sent, not yet
	// reported running.
	JobDispatched JobStatus = "dispatched"
	// JobRunning: the agent reported the job started.
	JobRunning JobStatus = "running"
	// JobRecovering: the agent holding the job disconnected; the job waits out
	// the recovery window for it to come back.
	JobRecovering JobStatus = "recovering"
	// JobCancelling: a cancel was sent to the agent; waiting for it to stop.
	JobCancelling JobStatus = "cancelling"

	JobSuccess   JobStatus = "success"
	JobFailed    JobStatus = "failed"
	JobCancelled JobStatus = "cancelled"
	JobSkipped   JobStatus = "skipped"
	// JobTimedOutStale: the agent stopped sending job heartbeats, or the job
	// waited in the queue past its expiry.
	JobTimedOutStale JobStatus = "timed_out_stale"
	// JobUnroutable: no connected agent and no agent that could ever connect
	// can run the job (its labels match nothing).
	JobUnroutable JobStatus = "unroutable"
	// JobAgentLost: the job had started when its agent was lost, the
	// recovery window ended, and its on_agent_lost policy said fail.
	JobAgentLost JobStatus = "agent_lost"
)

// JobStatuses lists every job status, in lifecycle order.
var JobStatuses = []JobStatus{
	JobPending, JobQueued, JobDispatched, JobRunning, JobRecovering, JobCancelling,
	JobSuccess, JobFailed, JobCancelled, JobSkipped, JobTimedOutStale, JobUnroutable, JobAgentLost,
}

// Valid reports whether s is a known job status.
func (s JobStatus) Valid() bool {
	_, ok := jobTransitions[s]
	return ok
}

// Terminal reports whether the job has finished; a terminal job never changes again.
func (s JobStatus) Terminal() bool {
	switch s {
	case JobSuccess, JobFailed, JobCancelled, JobSkipped, JobTimedOutStale, JobUnroutable, JobAgentLost:
		return true
	}
	return false
}

// Result is what a finished job or run means to a workflow author: the values
// of `needs.<job>.result` and of `when:`.
type Result string

const (
	ResultSuccess   Result = "success"
	ResultFailure   Result = "failure"
	ResultCancelled Result = "cancelled"
	ResultSkipped   Result = "skipped"
)

// Results lists every result.
var Results = []Result{ResultSuccess, ResultFailure, ResultCancelled, ResultSkipped}

// Valid reports whether r is a known result.
func (r Result) Valid() bool {
	switch r {
	case ResultSuccess, ResultFailure, ResultCancelled, ResultSkipped:
		return true
	}
	return false
}

// Result maps a terminal job status onto the result users see. It returns ""
// for a job that has not finished.
func (s JobStatus) Result() Result {
	switch s {
	case JobSuccess:
		return ResultSuccess
	case JobFailed, JobTimedOutStale, JobUnroutable, JobAgentLost:
		return ResultFailure
	case JobCancelled:
		return ResultCancelled
	case JobSkipped:
		return ResultSkipped
	}
	return ""
}

// jobTransitions is the job state machine: every legal (from → to) move.
// The store enforces it with compare-and-set updates; docs/states.md draws it.
var jobTransitions = map[JobStatus][]JobStatus{
	JobPending:    {JobQueued, JobSkipped, JobCancelled, JobFailed},
	JobQueued:     {JobDispatched, JobCancelled, JobFailed, JobTimedOutStale, JobUnroutable},
	JobDispatched: {JobRunning, JobQueued, JobRecovering, JobCancelling, JobCancelled, JobFailed, JobSuccess},
	JobRunning:    {JobSuccess, JobFailed, JobCancelled, JobCancelling, JobRecovering, JobTimedOutStale},
	JobRecovering: {JobRunning, JobDispatched, JobQueued, JobAgentLost, JobFailed, JobCancelled},
	JobCancelling: {JobCancelled, JobFailed, JobSuccess, JobTimedOutStale, JobAgentLost},

	JobSuccess:       nil,
	JobFailed:        nil,
	JobCancelled:     nil,
	JobSkipped:       nil,
	JobTimedOutStale: nil,
	JobUnroutable:    nil,
	JobAgentLost:     nil,
}

// CanTransition reports whether a job may move from one status to another.
func CanTransition(from, to JobStatus) bool {
	for _, s := range jobTransitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// TransitionsFrom returns the statuses a job in status s may move to.
func TransitionsFrom(s JobStatus) []JobStatus {
	return append([]JobStatus(nil), jobTransitions[s]...)
}

// RunStatus is where a run stands. A run is created pending, becomes running
// when its first job is dispatched, and ends when every job has ended.
type RunStatus string

const (
	RunPending    RunStatus = "pending"
	RunRunning    RunStatus = "running"
	RunCancelling RunStatus = "cancelling"
	RunSuccess    RunStatus = "success"
	RunFailed     RunStatus = "failed"
	RunCancelled  RunStatus = "cancelled"
)

// RunStatuses lists every run status.
var RunStatuses = []RunStatus{RunPending, RunRunning, RunCancelling, RunSuccess, RunFailed, RunCancelled}

// Terminal reports whether the run has finished.
func (s RunStatus) Terminal() bool {
	return s == RunSuccess || s == RunFailed || s == RunCancelled
}

// Result maps a terminal run status onto a result ("" while in flight).
func (s RunStatus) Result() Result {
	switch s {
	case RunSuccess:
		return ResultSuccess
	case RunFailed:
		return ResultFailure
	case RunCancelled:
		return ResultCancelled
	}
	return ""
}

// RollUp computes the terminal status of a run whose jobs have all finished:
// any failure fails the run; otherwise any cancellation cancels it; otherwise
// it succeeded (skipped jobs count as success). ok is false while any job is
// still in flight.
func RollUp(jobs []JobStatus) (status RunStatus, ok bool) {
	failed, cancelled := false, false
	for _, j := range jobs {
		if !j.Terminal() {
			return "", false
		}
		switch j.Result() {
		case ResultFailure:
			failed = true
		case ResultCancelled:
			cancelled = true
		}
	}
	switch {
	case failed:
		return RunFailed, true
	case cancelled:
		return RunCancelled, true
	}
	return RunSuccess, true
}

// StepStatus is where one step of a job stands, as reported by the agent.
type StepStatus string

const (
	StepPending   StepStatus = "pending"
	StepRunning   StepStatus = "running"
	StepSuccess   StepStatus = "success"
	StepFailed    StepStatus = "failed"
	StepSkipped   StepStatus = "skipped"
	StepCancelled StepStatus = "cancelled"
)

// StepStatuses lists every step status.
var StepStatuses = []StepStatus{StepPending, StepRunning, StepSuccess, StepFailed, StepSkipped, StepCancelled}

// Valid reports whether s is a known step status.
func (s StepStatus) Valid() bool {
	for _, v := range StepStatuses {
		if v == s {
			return true
		}
	}
	return false
}

// Terminal reports whether the step has finished.
func (s StepStatus) Terminal() bool {
	return s == StepSuccess || s == StepFailed || s == StepSkipped || s == StepCancelled
}
