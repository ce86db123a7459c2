package server

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/engine"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/ingress"
	"github.com/kilnci/kiln/internal/store"
)

// statusReporter posts a commit status per workflow run to the forge the
// run came from: pending while it runs, then success, failure or error, with
// a link to the run. It watches the engine's run changes and never blocks a
// run: the poster (forge.StatusReporter) debounces, retries and drops as
// needed.
type statusReporter struct {
	eng      *engine.Engine
	rep      *forge.StatusReporter
	baseURL  string
	log      *slog.Logger
	runsRead func(ctx context.Context, id string) (store.Run, error)
}

// newStatusPoster is the forge side of commit statuses: it posts them
// through each run's source. The metrics read its counters.
func newStatusPoster(sources *ingress.Sources, log *slog.Logger) *forge.StatusReporter {
	return forge.NewStatusReporter(func(ctx context.Context, sourceID string) (forge.StatusPoster, error) {
		_, repo, err := sources.Repo(ctx, sourceID)
		return repo, err
	}, forge.ReporterConfig{Logger: log})
}

func newStatusReporter(eng *engine.Engine, db *store.DB, rep *forge.StatusReporter, baseURL string, log *slog.Logger) *statusReporter {
	return &statusReporter{eng: eng, rep: rep, baseURL: baseURL, log: log, runsRead: db.Runs().Header}
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
	r.rep.Report(run.Source, run.Repository, run.SHA, forge.Status{
		State:       state,
		Context:     "kiln/" + run.Workflow,
		Description: describe(run, c.Status),
		TargetURL:   fmt.Sprintf("%s/runs/%d", r.baseURL, run.Number),
	})
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
