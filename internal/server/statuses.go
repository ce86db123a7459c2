package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/store"
)

// statusReporter posts a commit status per workflow run to the forge the
// run came from: pending while it runs, then success, failure or error, with
// a link to the run; for a GitHub App source with checks on, a check run
// instead (checks.go). It watches the engine's run changes and never
// blocks a run: the poster (forge.StatusReporter) debounces, retries and
// drops as needed.
type statusReporter struct {
	eng      *engine.Engine
	db       *store.DB
	sources  *ingress.Sources
	logs     *logstore.Store
	rep      *forge.StatusReporter
	baseURL  string
	log      *slog.Logger
	runsRead func(ctx context.Context, id string) (store.Run, error)
}

// newStatusPoster is the forge side of commit statuses: it posts them
// through each run's source. The metrics read its counters. fallback
// hears of check runs GitHub refused (posted as statuses instead).
func newStatusPoster(sources *ingress.Sources, log *slog.Logger, fallback func(string, forge.Status, string)) *forge.StatusReporter {
	return forge.NewStatusReporter(func(ctx context.Context, sourceID string) (forge.StatusPoster, error) {
		_, repo, err := sources.Repo(ctx, sourceID)
		return repo, err
	}, forge.ReporterConfig{Logger: log, Fallback: fallback})
}

func newStatusReporter(eng *engine.Engine, db *store.DB, sources *ingress.Sources, logs *logstore.Store, rep *forge.StatusReporter, baseURL string, log *slog.Logger) *statusReporter {
	return &statusReporter{eng: eng, db: db, sources: sources, logs: logs, rep: rep, baseURL: baseURL, log: log, runsRead: db.Runs().Header}
}

// Run reports until ctx ends.
func (r *statusReporter) Run(ctx context.Context) error {
	changes, stop := r.eng.Watch(1024)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.rep.Run(ctx) }()
	for {
		select {
		case <-ctx.Done():
			return <-done
		case c := <-changes:
			r.report(ctx, c)
		}
	}
}

func (r *statusReporter) report(ctx context.Context, c store.RunChange) {
	run, err := r.runsRead(ctx, c.ID)
	if err != nil {
		r.log.Warn("commit status: run unreadable", "run", c.Number, "err", err)
		return
	}
	if run.Source == "" || run.SHA == "" || run.Repository == "" {
		return
	}
	state := forge.StatePending
	if c.Status.Terminal() {
		state = forge.StateFor(c.Status)
	}
	st := forge.Status{
		State:       state,
		Context:     statusContext(run),
		Description: describe(run, c.Status),
		TargetURL:   fmt.Sprintf("%s/runs/%d", r.baseURL, run.Number),
	}
	if c.Status == kiln.RunFailed && run.FailureReason == "" {
		// "run #2 failed" alone sends everyone to the run's page: say
		// which jobs failed.
		if full, err := r.db.Runs().Get(ctx, run.ID); err == nil && len(full.Jobs) > 0 {
			st.Description = failedDescription(full)
		}
	}
	if r.sources != nil && checksOn(ctx, r.sources, run.Source) {
		st.Check = r.checkRun(ctx, run, c.Status)
	}
	r.rep.Report(run.Source, run.Repository, run.SHA, st)
}

// statusContext is a run's commit status context, "kiln/<workflow>
// (<event>)": a push run and a pull request run on one commit each keep
// their own status instead of overwriting each other's (B272).
func statusContext(run store.Run) string {
	var ev struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(run.Event, &ev) != nil || ev.Name == "" {
		return "kiln/" + run.Workflow
	}
	return fmt.Sprintf("kiln/%s (%s)", run.Workflow, ev.Name)
}

func describe(run store.Run, st kiln.RunStatus) string {
	switch {
	case st == kiln.RunPending && run.Approval.Waiting():
		// A fork's run an admin must approve: the pull request shows why
		// its checks wait, with a link to the run.
		return run.Approval.Reason
	}
	switch st {
	case kiln.RunPending:
		return fmt.Sprintf("run #%d is queued", run.Number)
	case kiln.RunRunning:
		return fmt.Sprintf("run #%d is running", run.Number)
	case kiln.RunCancelling:
		return fmt.Sprintf("run #%d is being cancelled", run.Number)
	case kiln.RunSuccess:
		return fmt.Sprintf("run #%d succeeded", run.Number)
	case kiln.RunFailed:
		if run.FailureReason != "" {
			return fmt.Sprintf("run #%d failed: %s", run.Number, run.FailureReason)
		}
		return fmt.Sprintf("run #%d failed", run.Number)
	}
	return fmt.Sprintf("run #%d was cancelled", run.Number)
}

// failedDescription is a failed run's status description: "run #2: 1 of 3
// jobs failed (vet)".
func failedDescription(run store.Run) string {
	var names []string
	for _, j := range run.Jobs {
		if failedJob(j) {
			names = append(names, j.Name)
		}
	}
	d := fmt.Sprintf("run #%d: %s", run.Number, jobsSummary(run.Jobs, kiln.RunFailed))
	if len(names) > 0 {
		d += " (" + strings.Join(names, ", ") + ")"
	}
	return d
}
