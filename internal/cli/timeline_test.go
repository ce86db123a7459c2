package cli

import (
	"testing"

	"github.com/kilnci/kiln"
)

// `kiln runs show` prints the run's timeline: the delivery and the trigger
// decision with its checks, then the releases, dispatches and requeues.
// Proves B317 (docs/behaviours.md).
func TestRunsShowTimeline(t *testing.T) {
	o := newOp(t)
	o.Dispatch(t)
	l := o.Dispatched(t, "agent-1")
	if _, err := o.DB.Queue().Requeue(t.Context(), l.Lease, "the agent is busy"); err != nil {
		t.Fatal(err)
	}
	o.Finish(t, o.Claim(t, "agent-2"), kiln.JobSuccess)
	out := o.ok(t, "runs", "show", "1")
	contains(t, out, "timeline:", "delivery", "dispatch event 1 received", "trigger", "passed ",
		"job.released         build      queued for an agent labelled linux",
		"job.dispatched       build      attempt 1 sent to agent agent-1",
		"job.requeued         build      back in the queue: the agent is busy",
		"job.dispatched       build      attempt 2 sent to agent agent-2",
		"job.released         test       needs met (build): queued for an agent labelled linux")
}
