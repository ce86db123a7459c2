package agent

import (
	"context"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
)

// Runner turns dispatched jobs into running ones. In production it is the
// executor (NewExecutorRunner); tests use a fake. Preparing is separate from
// starting so that a spec the runner cannot use is refused (job.reject
// invalid) before the agent acknowledges the dispatch.
type Runner interface {
	// Prepare checks a dispatched job; its error is a sentence sent back to
	// the orchestrator.
	Prepare(d *proto.Dispatch) (Prepared, error)
}

// Prepared is a job ready to start.
type Prepared interface {
	// Start runs the job and returns at once. Cancelling ctx is a forced
	// stop. The sink is called from the runner's goroutines until the
	// execution is done.
	Start(ctx context.Context, sink Sink) Execution
}

// Execution is a running job.
type Execution interface {
	// Cancel stops the job: gracefully (SIGTERM, grace period, SIGKILL) or
	// by force (SIGKILL at once).
	Cancel(force bool)
	Done() <-chan struct{}
	// Wait blocks until the job has ended and returns its result.
	Wait() Result
}

// Result is how a job ended. Status is success, failed or cancelled.
type Result struct {
	Status  kiln.JobStatus
	Outputs map[string]string
	Error   string
}

// Sink receives what a running job reports. The agent fills in the job id
// and the lease epoch; the runner reports steps by index (-1 is the checkout)
// and log lines numbered per step from 1.
type Sink interface {
	Step(proto.StepStatus)
	// Log takes ownership of lines.
	Log(step int, lines []proto.LogLine)
}
