package executor

import (
	"time"

	"github.com/kilnci/kiln"
)

// CheckoutIndex is the step index of the checkout pseudo-step: its status
// and log lines are reported like a step's, before step 0.
const CheckoutIndex = -1

// Log streams: what the step wrote, and lines kiln itself added to the
// step's log (checkout commands, retries, the truncation notice).
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
	StreamSystem = "system"
)

// Sink receives what a job does while it runs. The executor calls it from
// its own goroutines, one call at a time per job, in order: a step's log
// batches come before its terminal status event. Calls must return quickly
// (the agent spools to disk or memory); while a call blocks, the executor
// buffers a bounded amount of output and then stops reading the step's
// pipes, which makes the step's writes block.
type Sink interface {
	Step(StepEvent)
	Log(LogBatch)
}

// StepEvent reports a step starting (Status running, once per attempt),
// ending (success, failed, cancelled) or being skipped.
type StepEvent struct {
	Index      int // position in Job.Steps; CheckoutIndex for the checkout
	Name       string
	Status     kiln.StepStatus
	Attempt    int // 1-based attempt number; 0 when the step never ran
	ExitCode   int // the shell's exit status (128+n after signal n); -1 when there is none
	StartedAt  time.Time
	FinishedAt time.Time // zero while running
	Error      string    // why the step failed or was cancelled, as a sentence for users
	LogBytes   int64     // terminal events: bytes of output the step produced, shown or not
}

// LogLine is one line of a step's output, without its newline, secrets
// masked. Seq numbers the lines of one step from 1, across both streams and
// all attempts.
type LogLine struct {
	Seq    uint64
	Stream string // StreamStdout, StreamStderr or StreamSystem
	Text   string
	Time   time.Time
}

// LogBatch is consecutive log lines of one step.
type LogBatch struct {
	StepIndex int
	Lines     []LogLine
}

// Result is how a job ended.
type Result struct {
	Status  kiln.JobStatus    // JobSuccess, JobFailed or JobCancelled
	Error   string            // why the job failed or was cancelled
	Outputs map[string]string // the merged $KILN_OUTPUT of every step (later steps win)
	Steps   []StepEvent       // the terminal event of the checkout (if any) and every step
	// Workspace is the job's workspace directory when Job.KeepWorkspace
	// asked to keep it; "" once it has been removed.
	Workspace string
}

// discardSink is used when the caller passes no Sink.
type discardSink struct{}

func (discardSink) Step(StepEvent) {}
func (discardSink) Log(LogBatch)   {}
