package runrules

import "github.com/kilnci/kiln"

// Stop is how a cancel — fail_fast, or the run's — reaches one unfinished
// job. The store also stop-marks every job it reaches: a stopped job is never
// queued again, whatever races the cancel.
type Stop int

const (
	// StopNothing: the job has ended, or is already being cancelled.
	StopNothing Stop = iota
	// StopNow: no agent is running the job (pending, queued, or recovering
	// after its agent was lost); it is cancelled at once.
	StopNow
	// StopAsk: the job is on an agent (dispatched, running); it becomes
	// cancelling and the agent is asked to stop it. It ends when the agent
	// answers, or when a forced cancel or a sweep ends it.
	StopAsk
)

// StopFor decides how a cancel reaches a job in status s.
func StopFor(s kiln.JobStatus) Stop {
	switch s {
	case kiln.JobPending, kiln.JobQueued, kiln.JobRecovering:
		return StopNow
	case kiln.JobDispatched, kiln.JobRunning:
		return StopAsk
	}
	return StopNothing
}

// Forced reports whether a forced cancel — a second request, after the
// agents did not answer the first — also ends a job in status s at once:
// every job on an agent or being cancelled is cancelled without waiting
// for its agent (which is still asked to stop).
func Forced(s kiln.JobStatus) bool {
	return s == kiln.JobDispatched || s == kiln.JobRunning || s == kiln.JobCancelling
}

// FailFastMessage is the error of a sibling fail_fast cancelled.
func FailFastMessage(failed string) string {
	return "cancelled by fail_fast: " + failed + " failed"
}
