package localrun

import (
	"encoding/json"
	"io"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Result is what `kiln run --json` prints: each run and its jobs.
type Result struct {
	Status string      `json:"status"` // success, or failure when a run did not succeed
	Runs   []RunResult `json:"runs"`
}

// RunResult is one workflow's run.
type RunResult struct {
	Workflow string      `json:"workflow"`
	File     string      `json:"file"`
	Status   string      `json:"status"`
	Jobs     []JobResult `json:"jobs"`
}

// JobResult is one job: its status, how long it ran, and why it failed.
type JobResult struct {
	Name       string  `json:"name"`
	Status     string  `json:"status"`
	Result     string  `json:"result"` // success, failure, cancelled or skipped
	DurationMS int64   `json:"duration_ms,omitempty"`
	Error      string  `json:"error,omitempty"`
	Steps      []Steps `json:"steps,omitempty"`
}

// Steps is one step of a job.
type Steps struct {
	Name     string `json:"name"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

// jsonResult writes the result and returns the exit code.
func jsonResult(w io.Writer, runs []store.Run) (int, error) {
	res := Result{Status: string(kiln.ResultSuccess), Runs: []RunResult{}}
	code := ExitOK
	for _, run := range runs {
		rr := RunResult{Workflow: run.Workflow, File: run.WorkflowFile, Status: string(run.Status), Jobs: []JobResult{}}
		if run.Status != kiln.RunSuccess {
			code, res.Status = ExitFailed, string(kiln.ResultFailure)
		}
		for _, j := range sortedJobs(run) {
			jr := JobResult{Name: j.Name, Status: string(j.Status), Result: string(j.Status.Result()), Error: j.Error}
			if !j.StartedAt.IsZero() && !j.FinishedAt.IsZero() {
				jr.DurationMS = j.FinishedAt.Sub(j.StartedAt).Milliseconds()
			}
			for _, s := range j.Steps {
				jr.Steps = append(jr.Steps, Steps{Name: s.Name, Status: string(s.Status), ExitCode: s.ExitCode})
			}
			rr.Jobs = append(rr.Jobs, jr)
		}
		res.Runs = append(res.Runs, rr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return code, enc.Encode(res)
}
