package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/workflow"
)

// GitHub check runs for sources with "checks": true (a GitHub App): what a
// run's check run says, built from the run, its jobs, the failing steps'
// logs and the workflow file. The poster (forge) creates and updates the
// check run, or falls back to a commit status when GitHub refuses it.

const (
	// logTailLines is how many of a failing step's last log lines its
	// annotation quotes.
	logTailLines = 20
)

// checksOn reports whether the source (by id) posts check runs.
func checksOn(ctx context.Context, sources *ingress.Sources, id string) bool {
	fs, _, err := sources.Repo(ctx, id)
	return err == nil && fs.GitHub != nil && fs.GitHub.Checks && fs.GitHub.App != nil
}

// checkRun is the check run of a run in status st; a finished run's lists
// its jobs and annotates its failing steps.
func (r *statusReporter) checkRun(ctx context.Context, run store.Run, st kiln.RunStatus) *forge.CheckRun {
	c := &forge.CheckRun{ExternalID: run.ID, Title: describe(run, st)}
	switch {
	case st == kiln.RunPending:
		c.Status = forge.CheckQueued
		return c
	case !st.Terminal():
		c.Status, c.StartedAt = forge.CheckInProgress, run.StartedAt
		return c
	}
	c.Status, c.StartedAt, c.CompletedAt = forge.CheckCompleted, run.StartedAt, run.FinishedAt
	if c.CompletedAt.IsZero() {
		c.CompletedAt = time.Now()
	}
	full, err := r.db.Runs().Get(ctx, run.ID)
	if err != nil {
		r.log.Warn("check run: the run's jobs are unreadable; reporting without them", "run", run.Number, "err", err)
		c.Conclusion = conclusion(run, st)
		return c
	}
	c.Conclusion = conclusion(full, st)
	c.Title = jobsSummary(full.Jobs, st)
	var lines []string
	if run.FailureReason != "" {
		lines = append(lines, "**"+mdEscape(run.FailureReason)+"**", "")
	} else if run.CancelReason != "" {
		lines = append(lines, "Cancelled: "+mdEscape(run.CancelReason), "")
	}
	wf := r.workflowOf(ctx, full)
	for _, j := range full.Jobs {
		lines = append(lines, "- "+jobLine(j))
		if failedJob(j) {
			c.Annotations = append(c.Annotations, r.failingStep(full, j, wf))
		}
	}
	lines = append(lines, "", fmt.Sprintf("[Run #%d on kiln](%s/runs/%d)", run.Number, r.baseURL, run.Number))
	c.Summary = strings.Join(lines, "\n")
	return c
}

// conclusion maps a finished run onto GitHub's check conclusions: a run
// whose jobs were all skipped is skipped, one stopped by a timeout (its
// workflow's, a job's or a step's) timed_out.
func conclusion(run store.Run, st kiln.RunStatus) forge.CheckConclusion {
	switch st {
	case kiln.RunSuccess:
		skipped := len(run.Jobs) > 0
		for _, j := range run.Jobs {
			skipped = skipped && j.Status == kiln.JobSkipped
		}
		if skipped {
			return forge.ConclusionSkipped
		}
		return forge.ConclusionSuccess
	case kiln.RunCancelled:
		if strings.HasPrefix(run.CancelReason, "workflow timeout") {
			return forge.ConclusionTimedOut
		}
		return forge.ConclusionCancelled
	}
	for _, j := range run.Jobs {
		if failedJob(j) && strings.Contains(j.Error, "timed out after") {
			return forge.ConclusionTimedOut
		}
	}
	return forge.ConclusionFailure
}

// failedJob reports whether a job ended without passing for a reason of
// its own (not skipped, not cancelled).
func failedJob(j store.Job) bool {
	return j.Status.Terminal() && j.Status != kiln.JobSuccess && j.Status != kiln.JobSkipped && j.Status != kiln.JobCancelled
}

// jobsSummary is the check run's title: "1 of 3 jobs failed, 1 skipped",
// "all 3 jobs passed".
func jobsSummary(jobs []store.Job, st kiln.RunStatus) string {
	var failed, skipped, passed int
	for _, j := range jobs {
		switch {
		case failedJob(j):
			failed++
		case j.Status == kiln.JobSkipped:
			skipped++
		case j.Status == kiln.JobSuccess:
			passed++
		}
	}
	n := len(jobs)
	noun := "jobs"
	if n == 1 {
		noun = "job"
	}
	var s string
	switch {
	case failed > 0:
		s = fmt.Sprintf("%d of %d %s failed", failed, n, noun)
	case st == kiln.RunCancelled:
		s = fmt.Sprintf("cancelled: %d of %d %s passed", passed, n, noun)
	case n == 1 && passed == 1:
		return "the job passed"
	case passed == n:
		return fmt.Sprintf("all %d jobs passed", n)
	default:
		s = fmt.Sprintf("%d of %d %s passed", passed, n, noun)
	}
	if skipped > 0 {
		s += fmt.Sprintf(", %d skipped", skipped)
	}
	return s
}

// jobLine is a job's line in the summary.
func jobLine(j store.Job) string {
	mark := map[bool]string{true: "✅", false: "❌"}[j.Status == kiln.JobSuccess]
	if j.Status == kiln.JobSkipped || j.Status == kiln.JobCancelled {
		mark = "⏭️"
	}
	s := fmt.Sprintf("%s **%s** %s", mark, mdEscape(j.Name), j.Status)
	if !failedJob(j) {
		return s
	}
	// The failing step and its own error ("exit code 1"): the job's error
	// would name the step a second time.
	why := j.Error
	if step, ok := firstFailed(j); ok {
		s += fmt.Sprintf(" at step _%s_", mdEscape(stepName(step)))
		why = firstNonEmpty(step.Error, why)
	}
	if why != "" {
		s += ": " + mdEscape(firstLineOf(why))
	}
	return s
}

// firstFailed is a job's first failed step.
func firstFailed(j store.Job) (store.Step, bool) {
	for _, s := range j.Steps {
		if s.Status == kiln.StepFailed {
			return s, true
		}
	}
	return store.Step{}, false
}

func stepName(s store.Step) string {
	if s.Index < 0 && s.Name == "" {
		return "checkout"
	}
	return s.Name
}

// failingStep is the annotation of a failed job: its failing step (or the
// job itself) at the step's line of the workflow file, with the last lines
// of the step's log as the message.
func (r *statusReporter) failingStep(run store.Run, j store.Job, wf *workflow.Workflow) forge.Annotation {
	a := forge.Annotation{Path: run.WorkflowFile, StartLine: 1, Level: forge.AnnotationFailure,
		Title: fmt.Sprintf("%s failed", j.Name)}
	var wj *workflow.Job
	if wf != nil {
		wj = wf.Job(j.Base)
	}
	if wj != nil {
		a.StartLine = wj.Pos.Line
	}
	step, ok := firstFailed(j)
	if !ok {
		a.Message = firstNonEmpty(j.Error, fmt.Sprintf("the job ended %s", j.Status))
		return a
	}
	a.Title = fmt.Sprintf("%s › %s failed", j.Name, stepName(step))
	if wj != nil && step.Index >= 0 && step.Index < len(wj.Steps) {
		a.StartLine = wj.Steps[step.Index].Pos.Line
	}
	var msg []string
	if step.Error != "" {
		msg = append(msg, step.Error)
	} else if step.ExitCode != nil {
		msg = append(msg, fmt.Sprintf("exited with code %d", *step.ExitCode))
	}
	if tail := r.logTail(run.ID, j, step.Index); tail != "" {
		msg = append(msg, tail)
	}
	a.Message = firstNonEmpty(strings.Join(msg, "\n"), j.Error, "the step failed")
	return a
}

// logTail is the last logTailLines lines of a step's log.
func (r *statusReporter) logTail(runID string, j store.Job, step int) string {
	if r.logs == nil {
		return ""
	}
	ref := logstore.Ref{RunID: runID, JobID: j.ID, Epoch: j.LeaseEpoch, Step: step}
	last, err := r.logs.Last(ref)
	if err != nil || last == 0 {
		return ""
	}
	after := uint64(0)
	if last > logTailLines {
		after = last - logTailLines
	}
	lines, err := r.logs.Read(ref, after, logTailLines)
	if err != nil {
		return ""
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = l.Text
	}
	return strings.Join(out, "\n")
}

// workflowOf parses the run's workflow file for its jobs' and steps'
// lines (nil when it cannot be read).
func (r *statusReporter) workflowOf(ctx context.Context, run store.Run) *workflow.Workflow {
	content, err := r.db.Runs().WorkflowDefinition(ctx, run.WorkflowHash)
	if err != nil {
		return nil
	}
	wf, err := workflow.Parse(run.WorkflowFile, content)
	if err != nil {
		return nil
	}
	return wf
}

// invalid posts a failed check run per broken workflow file of a delivery
// that ended invalid_workflow, each lint error an annotation at its line,
// when its source posts check runs. (Commit status sources show lint
// errors in kiln events only: a status cannot point at a line.)
func (r *statusReporter) invalid(iw ingress.InvalidWorkflows) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev := iw.Event
	if ev == nil || ev.SHA == "" || ev.Repository == "" || !checksOn(ctx, r.sources, iw.Source) {
		return
	}
	byFile := map[string][]*workflow.Error{}
	var files []string
	for _, e := range iw.Errors {
		if _, ok := byFile[e.File]; !ok {
			files = append(files, e.File)
		}
		byFile[e.File] = append(byFile[e.File], e)
	}
	now := time.Now()
	for _, file := range files {
		errs := byFile[file]
		c := &forge.CheckRun{ExternalID: fmt.Sprintf("delivery-%d", iw.DeliveryID), Status: forge.CheckCompleted,
			Conclusion: forge.ConclusionFailure, StartedAt: now, CompletedAt: now,
			Title: fmt.Sprintf("%s is not a valid workflow: %d %s", file, len(errs), plural(len(errs), "error", "errors"))}
		lines := []string{fmt.Sprintf("kiln ran nothing for this %s: `kiln lint` finds these problems in `%s`.", ev.Name, mdEscape(file)), ""}
		for _, e := range errs {
			lines = append(lines, fmt.Sprintf("- line %d: %s", e.Line, mdEscape(e.Msg)))
			c.Annotations = append(c.Annotations, forge.Annotation{Path: file, StartLine: max(e.Line, 1),
				Level: forge.AnnotationFailure, Title: "invalid workflow", Message: e.Msg})
		}
		c.Summary = strings.Join(lines, "\n")
		name := fmt.Sprintf("kiln/%s (%s)", workflow.DefaultName(file), ev.Name)
		r.rep.Report(iw.Source, ev.Repository, ev.SHA, forge.Status{State: forge.StateFailure, Context: name,
			Description: fmt.Sprintf("invalid workflow: %s", errs[0].Error()),
			TargetURL:   r.baseURL + "/events", Check: c})
	}
}

// fellBack records on the run (or, for a lint check run, the delivery) why
// its check run became a commit status.
func (r *statusReporter) fellBack(_ string, st forge.Status, reason string) {
	if st.Check == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	note := "GitHub refused the check run " + st.Context + "; posted a commit status instead: " + reason
	var err error
	if d, ok := strings.CutPrefix(st.Check.ExternalID, "delivery-"); ok {
		id, perr := strconv.ParseInt(d, 10, 64)
		if perr != nil {
			return
		}
		err = r.db.Ingress().Note(ctx, id, note)
	} else {
		err = r.db.Runs().SetReportNote(ctx, st.Check.ExternalID, note)
	}
	if err != nil {
		r.log.Warn("record why a check run became a commit status", "for", st.Check.ExternalID, "err", err)
	}
}

func mdEscape(s string) string {
	return strings.NewReplacer("`", "'", "*", `\*`, "_", `\_`, "<", "&lt;", ">", "&gt;", "\n", " ").Replace(s)
}

func firstLineOf(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
