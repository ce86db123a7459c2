package runrules

import (
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

const maxAttempts = 3

// Putting a held job back in the queue: a stop mark wins, then the attempt
// budget; only jobs an agent holds or held are touched (B31).
func TestRequeued(t *testing.T) {
	why := "agent busy"
	cases := []struct {
		name string
		h    Held
		want Outcome
	}{
		{"dispatched", Held{Status: kiln.JobDispatched, Attempts: 1}, Outcome{Verdict: Requeue, Reason: why}},
		{"one attempt left", Held{Status: kiln.JobDispatched, Attempts: maxAttempts - 1}, Outcome{Verdict: Requeue, Reason: why}},
		{"attempts used", Held{Status: kiln.JobDispatched, Attempts: maxAttempts}, Outcome{Verdict: GiveUp, Reason: "agent busy; gave up after 3 dispatch attempts"}},
		{"stopped", Held{Status: kiln.JobDispatched, Stopped: true, Attempts: maxAttempts}, Outcome{Verdict: Cancel, Reason: "cancelled: agent busy"}},
		{"being cancelled", Held{Status: kiln.JobCancelling, Attempts: 1}, Outcome{Verdict: Cancel, Reason: "cancelled: agent busy"}},
		{"recovering", Held{Status: kiln.JobRecovering, Attempts: 2}, Outcome{Verdict: Requeue, Reason: why}},
		{"recovering, attempts used", Held{Status: kiln.JobRecovering, Attempts: 3}, Outcome{Verdict: GiveUp, Reason: "agent busy; gave up after 3 dispatch attempts"}},
		{"running: not a requeue", Held{Status: kiln.JobRunning, Attempts: 1}, Outcome{}},
		{"queued: not held", Held{Status: kiln.JobQueued}, Outcome{}},
		{"finished", Held{Status: kiln.JobSuccess, Stopped: true}, Outcome{}},
	}
	for _, c := range cases {
		if got := Requeued(c.h, maxAttempts, why); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}

// The end of a recovery window, for every on_agent_lost policy, started or
// not, stopped or not, first or second loss, attempts left or not (B53).
func TestWindowOver(t *testing.T) {
	why := "gone"
	requeue := Outcome{Verdict: Requeue, Reason: "gone before the job started"}
	giveUp := Outcome{Verdict: GiveUp, Reason: "gone before the job started; gave up after 3 dispatch attempts"}
	cancelUnstarted := Outcome{Verdict: Cancel, Reason: "cancelled: gone before the job started"}
	retry := Outcome{Verdict: Retry, Reason: "gone while the job ran; retrying once (on_agent_lost: retry)"}
	cancel := Outcome{Verdict: Cancel, Reason: "cancelled: gone"}
	failPolicy := Outcome{Verdict: Lose, Reason: "gone while the job ran (on_agent_lost: fail)"}
	again := Outcome{Verdict: Lose, Reason: "gone while the job ran, and it cannot be retried again (its one retry after a lost agent is used)"}
	cases := []struct {
		retryPolicy, started, stopped bool
		lost, attempts                int
		want                          Outcome
	}{
		// Never started: requeued like a rejected job, whatever the policy.
		{true, false, false, 0, 1, requeue},
		{false, false, false, 0, 1, requeue},
		{true, false, false, 1, 1, requeue},
		{true, false, false, 0, 3, giveUp},
		{false, false, false, 0, 3, giveUp},
		{true, false, true, 0, 1, cancelUnstarted},
		{false, false, true, 0, 3, cancelUnstarted},
		// Started, on_agent_lost: retry.
		{true, true, false, 0, 1, retry},
		{true, true, false, 0, 2, retry},
		{true, true, false, 0, 3, again}, // no attempt left for the retry
		{true, true, false, 1, 1, again}, // the second loss
		{true, true, true, 0, 1, cancel},
		{true, true, true, 1, 3, cancel},
		// Started, on_agent_lost: fail.
		{false, true, false, 0, 1, failPolicy},
		{false, true, false, 0, 3, failPolicy},
		{false, true, true, 0, 1, cancel},
	}
	for _, c := range cases {
		h := Held{Status: kiln.JobRecovering, RetryIfLost: c.retryPolicy, Started: c.started, Stopped: c.stopped, LostCount: c.lost, Attempts: c.attempts}
		if got := WindowOver(h, maxAttempts, why); got != c.want {
			t.Errorf("%+v: %+v, want %+v", c, got, c.want)
		}
	}
	for _, s := range kiln.JobStatuses {
		if s == kiln.JobRecovering {
			continue
		}
		if got := WindowOver(Held{Status: s, Started: true, RetryIfLost: true}, maxAttempts, why); got != (Outcome{}) {
			t.Errorf("%s is not recovering, yet %+v", s, got)
		}
	}
}

func TestAgentGone(t *testing.T) {
	want := map[kiln.JobStatus]Verdict{kiln.JobDispatched: AwaitAgent, kiln.JobRunning: AwaitAgent, kiln.JobCancelling: Cancel}
	for _, s := range kiln.JobStatuses {
		got := AgentGone(s)
		if got.Verdict != want[s] {
			t.Errorf("%s: %+v, want %v", s, got, want[s])
		}
		if (got.Verdict == Cancel) != (got.Reason == "the agent was lost while the job was being cancelled") {
			t.Errorf("%s: reason %q", s, got.Reason)
		}
	}
}

// A reconnecting agent keeps what it still holds under the same epoch (B52).
func TestAgentBack(t *testing.T) {
	cases := []struct {
		name   string
		h      Held
		epoch  int64
		keep   bool
		resume kiln.JobStatus
	}{
		{"recovering, started", Held{Status: kiln.JobRecovering, AgentID: "a1", Epoch: 4, Started: true}, 4, true, kiln.JobRunning},
		{"recovering, not started", Held{Status: kiln.JobRecovering, AgentID: "a1", Epoch: 4}, 4, true, kiln.JobDispatched},
		{"still running", Held{Status: kiln.JobRunning, AgentID: "a1", Epoch: 4, Started: true}, 4, true, ""},
		{"still dispatched", Held{Status: kiln.JobDispatched, AgentID: "a1", Epoch: 4}, 4, true, ""},
		{"being cancelled", Held{Status: kiln.JobCancelling, AgentID: "a1", Epoch: 4}, 4, true, ""},
		{"older epoch", Held{Status: kiln.JobRecovering, AgentID: "a1", Epoch: 4, Started: true}, 3, false, ""},
		{"another agent's now", Held{Status: kiln.JobRunning, AgentID: "a2", Epoch: 4}, 4, false, ""},
		{"requeued", Held{Status: kiln.JobQueued, Epoch: 4}, 4, false, ""},
		{"finished", Held{Status: kiln.JobSuccess, AgentID: "a1", Epoch: 4}, 4, false, ""},
		{"agent_lost", Held{Status: kiln.JobAgentLost, AgentID: "a1", Epoch: 4}, 4, false, ""},
		{"no such job", Held{}, 1, false, ""},
	}
	for _, c := range cases {
		keep, resume := AgentBack(c.h, "a1", c.epoch)
		if keep != c.keep || resume != c.resume {
			t.Errorf("%s: keep=%v resume=%q, want %v %q", c.name, keep, resume, c.keep, c.resume)
		}
	}
}

func TestStale(t *testing.T) {
	got := Stale(90*time.Second + 400*time.Millisecond)
	if got.Verdict != TimeOut || got.Reason != "no heartbeat from the agent for more than 1m30s" {
		t.Fatalf("%+v", got)
	}
}

// A queued job past its timeout: its provisioning error, else unroutable,
// else the generic queue-timeout message, the run's reason left alone (B40).
func TestExpired(t *testing.T) {
	req := kiln.Requirement{RunsOn: kiln.NewLabels("linux", "gpu"), Exclude: kiln.NewLabels("slow")}
	cases := []struct {
		name string
		e    Expiring
		want Outcome
	}{
		{"provisioning failed", Expiring{Requirement: req, LastProvisioningError: "quota exceeded", Unroutable: true, Waited: time.Minute},
			Outcome{Verdict: TimeOut, Reason: "quota exceeded", RunFailure: "quota exceeded"}},
		{"nothing can run it", Expiring{Requirement: req, Unroutable: true, Waited: time.Minute},
			Outcome{Verdict: Unroute, Reason: "unroutable: no connected agent and no scaler can offer labels gpu, linux without slow"}},
		{"no agent in time", Expiring{Requirement: req, Waited: 10*time.Minute + 300*time.Millisecond},
			Outcome{Verdict: TimeOut, Reason: "queue timeout: no agent took this job within 10m0s"}},
	}
	for _, c := range cases {
		if got := Expired(c.e); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
	if m := UnroutableMessage(kiln.Requirement{}); m != "unroutable: no connected agent and no scaler can offer an agent without mandatory labels" {
		t.Errorf("no labels: %q", m)
	}
}
