package runrules

import (
	"fmt"
	"time"

	"github.com/kilnci/kiln"
)

// Held is what the recovery rules read of a job an agent holds or held.
type Held struct {
	Status   kiln.JobStatus
	AgentID  string // the agent of the current (or last) lease
	Epoch    int64  // the lease epoch
	Stopped  bool   // a cancel reached it: it is never queued again
	Attempts int    // dispatches so far, this one included
	Started  bool   // the agent reported the job started
	// RetryIfLost is on_agent_lost: retry (the default); false is fail.
	RetryIfLost bool
	// LostCount counts the agent losses the job was already retried after.
	LostCount int
}

// Verdict is what becomes of a job an agent held, or of a queued job that
// waited too long.
type Verdict int

const (
	// Leave: the job is not in a status this rule acts on (it moved on).
	Leave Verdict = iota
	// Requeue: back to the queue for another agent; its next claim counts
	// another attempt.
	Requeue
	// Retry: back to the queue after its agent was lost while it ran, using
	// its one on_agent_lost retry (LostCount goes up).
	Retry
	// GiveUp: failed, out of dispatch attempts.
	GiveUp
	// Cancel: cancelled — a stop mark reached it, or it was being cancelled.
	Cancel
	// Lose: agent_lost — it had started, its agent did not come back, and
	// it may not be retried.
	Lose
	// AwaitAgent: recovering — its agent is gone; it waits out the recovery
	// window for the agent to come back.
	AwaitAgent
	// TimeOut: timed_out_stale — no heartbeat for too long, or no agent took
	// it from the queue in time.
	TimeOut
	// Unroute: unroutable — nothing that is or could be connected can run it.
	Unroute
)

// Outcome is a Verdict and its words: the job's error when it ends, why it
// went back to the queue when it is requeued.
type Outcome struct {
	Verdict Verdict
	Reason  string
	// RunFailure, when set, becomes the run's failure_reason if the run has
	// none yet.
	RunFailure string
}

// Requeued decides a job going back to the queue because its agent rejected
// it (busy, draining), did not acknowledge it in time, or was lost before
// the job started. why says which. A stop mark wins: the job is cancelled,
// never queued again. A job that used maxAttempts dispatches fails.
func Requeued(h Held, maxAttempts int, why string) Outcome {
	switch {
	case h.Status != kiln.JobDispatched && h.Status != kiln.JobCancelling && h.Status != kiln.JobRecovering:
		return Outcome{}
	case h.Stopped || h.Status == kiln.JobCancelling:
		return Outcome{Verdict: Cancel, Reason: "cancelled: " + why}
	case h.Attempts >= maxAttempts:
		return Outcome{Verdict: GiveUp, Reason: fmt.Sprintf("%s; gave up after %d dispatch attempts", why, maxAttempts)}
	}
	return Outcome{Verdict: Requeue, Reason: why}
}

// AgentGone decides a job its agent held when the agent was lost (its
// connection dropped, or its heartbeats stopped): a dispatched or running
// job waits out the recovery window; a job being cancelled is cancelled,
// since no agent is left to confirm it.
func AgentGone(s kiln.JobStatus) Outcome {
	switch s {
	case kiln.JobDispatched, kiln.JobRunning:
		return Outcome{Verdict: AwaitAgent}
	case kiln.JobCancelling:
		return Outcome{Verdict: Cancel, Reason: "the agent was lost while the job was being cancelled"}
	}
	return Outcome{}
}

// AgentBack decides a job a reconnecting agent lists under a lease epoch.
// The agent keeps it while it still holds it under that epoch; a job
// waiting out its recovery window resumes as running (it had started) or
// dispatched (it had not). Any other job — requeued, finished, claimed
// again under a newer epoch — is refused: the agent must abandon it.
func AgentBack(h Held, agentID string, epoch int64) (keep bool, resume kiln.JobStatus) {
	if h.AgentID != agentID || h.Epoch != epoch {
		return false, ""
	}
	switch h.Status {
	case kiln.JobRecovering:
		if h.Started {
			return true, kiln.JobRunning
		}
		return true, kiln.JobDispatched
	case kiln.JobDispatched, kiln.JobRunning, kiln.JobCancelling:
		return true, ""
	}
	return false, ""
}

// WindowOver decides a recovering job whose agent did not come back: the
// recovery window passed, or the agent reconnected without it. why says
// which. A job that had not started is requeued like a rejected one. A
// started job follows on_agent_lost: retry requeues it once (if it has an
// attempt left), and a second loss — or fail — ends it agent_lost. A stop
// mark cancels it instead.
func WindowOver(h Held, maxAttempts int, why string) Outcome {
	switch {
	case h.Status != kiln.JobRecovering:
		return Outcome{}
	case !h.Started:
		return Requeued(h, maxAttempts, why+" before the job started")
	case !h.Stopped && h.RetryIfLost && h.LostCount == 0 && h.Attempts < maxAttempts:
		return Outcome{Verdict: Retry, Reason: why + " while the job ran; retrying once (on_agent_lost: retry)"}
	case h.Stopped:
		return Outcome{Verdict: Cancel, Reason: "cancelled: " + why}
	case !h.RetryIfLost:
		return Outcome{Verdict: Lose, Reason: why + " while the job ran (on_agent_lost: fail)"}
	}
	return Outcome{Verdict: Lose, Reason: why + " while the job ran, and it cannot be retried again (its one retry after a lost agent is used)"}
}

// Stale decides a running (or cancelling) job whose agent sent no job
// heartbeat for longer than after: it ends timed_out_stale. Which jobs are
// that old is the store's indexed query.
func Stale(after time.Duration) Outcome {
	return Outcome{Verdict: TimeOut, Reason: fmt.Sprintf("no heartbeat from the agent for more than %s", after.Round(time.Second))}
}
