package engine

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Run applies the Effects the dispatcher reports and runs the engine's
// sweeps until ctx ends. It returns once, besides, the dispatcher has
// closed its Effects (the fleet does when its Run returns), so what the
// fleet's last operations committed is still applied.
func (e *Engine) Run(ctx context.Context) error {
	var applying sync.WaitGroup
	if e.d != nil {
		if effects := e.d.Effects(); effects != nil {
			applying.Go(func() {
				for eff := range effects {
					e.Apply(eff)
				}
			})
		}
	}
	defer applying.Wait()
	t := time.NewTicker(e.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			// The sweeps are the leader's work: one server runs them.
			if e.cfg.Leading == nil || e.cfg.Leading() {
				e.Sweep(ctx)
			}
		}
	}
}

// Sweep runs every sweep once: runs past their deadline are cancelled,
// expired queued jobs end (with their last provisioning error when there is
// one), jobs no agent could ever run fail as unroutable after the grace,
// and cancels agents never confirmed are forced after the cancel grace.
// Failures are logged and retried on the next sweep.
func (e *Engine) Sweep(ctx context.Context) {
	for _, step := range []struct {
		name string
		fn   func(context.Context) error
	}{
		{"run deadlines", e.sweepDeadlines},
		{"queue expiry", e.sweepExpiry},
		{"unroutable probe", e.sweepUnroutable},
		{"cancel grace", e.sweepCancelGrace},
	} {
		if err := step.fn(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("sweep failed; retrying on the next one", "sweep", step.name, "err", err)
		}
	}
}

func (e *Engine) sweepDeadlines(ctx context.Context) error {
	runs, err := e.db.Runs().Overdue(ctx, 100)
	if err != nil {
		return err
	}
	for _, r := range runs {
		reason := "workflow timeout: the run exceeded its timeout"
		if !r.Deadline.IsZero() && !r.CreatedAt.IsZero() {
			reason = fmt.Sprintf("workflow timeout: the run exceeded its timeout of %s", r.Deadline.Sub(r.CreatedAt).Round(time.Second))
		}
		e.log.Info("cancelling a run past its deadline", "run", r.Number, "workflow", r.Workflow)
		// A run already cancelling is forced: its deadline has passed too.
		if _, err := e.Cancel(ctx, r.ID, reason); err != nil && kiln.ErrorCode(err) != kiln.CodeConflict {
			return err
		}
	}
	return nil
}

func (e *Engine) sweepExpiry(ctx context.Context) error {
	agents, err := e.knownAgents(ctx)
	if err != nil {
		return err
	}
	res, err := e.db.Queue().Expire(ctx, func(r kiln.Requirement) bool { return !e.routable(agents, r) })
	if err != nil {
		return err
	}
	for _, j := range res.Jobs {
		e.log.Info("queued job expired", "run", j.RunID, "job", j.Name, "status", j.Status, "error", j.Error)
	}
	e.Apply(res.Effects)
	return nil
}

// knownAgentWindow is how recently an agent must have been seen to count as
// one that could still come back and run a job.
const knownAgentWindow = 24 * time.Hour

func (e *Engine) knownAgents(ctx context.Context) ([]kiln.AgentLabels, error) {
	return e.db.Auth().KnownLabels(ctx, e.cfg.Clock().Add(-knownAgentWindow))
}

// routable reports whether a known agent, or an agent a scaler would start
// (B169), could run a job requiring r.
func (e *Engine) routable(agents []kiln.AgentLabels, r kiln.Requirement) bool {
	if e.cfg.Scalers != nil && e.cfg.Scalers.Serves(r) {
		return true
	}
	for _, a := range agents {
		if a.Accepts(r) {
			return true
		}
	}
	return false
}

// sweepUnroutable fails queued jobs whose requirement no connected agent
// and no agent seen in the last day accepts, once that has been true for
// the whole grace period. It reads only the small set of distinct queue keys
// on the common path, never the whole queue; since when each job has been
// unroutable is kept in the database (store.Queue.SweepUnroutable), so a
// restart does not start the grace again.
func (e *Engine) sweepUnroutable(ctx context.Context) error {
	if e.cfg.UnroutableGrace == 0 {
		return nil
	}
	keys, err := e.db.Queue().Keys(ctx)
	if err != nil {
		return err
	}
	agents, err := e.knownAgents(ctx)
	if err != nil {
		return err
	}
	var lost []string
	for _, k := range keys {
		if !e.routable(agents, store.KeyRequirement(k)) {
			lost = append(lost, k)
		}
	}
	res, err := e.db.Queue().SweepUnroutable(ctx, lost, e.cfg.UnroutableGrace, func(r kiln.Requirement) string {
		return e.unroutableMessage(r)
	})
	if err != nil {
		return err
	}
	if len(res.Jobs) > 0 {
		e.log.Warn("jobs no agent can run failed as unroutable", "jobs", len(res.Jobs))
		if unroutable := e.cfg.Hooks.Unroutable; unroutable != nil {
			unroutable(len(res.Jobs))
		}
	}
	e.Apply(res.Effects)
	return nil
}

// unroutableMessage says what no agent offers and, when scalers are
// configured, that none of them serves it either, naming them (B169).
func (e *Engine) unroutableMessage(r kiln.Requirement) string {
	msg := unroutableMessage(r, e.cfg.UnroutableGrace)
	if e.cfg.Scalers == nil {
		return msg
	}
	if why := e.cfg.Scalers.TooBig(r); why != "" {
		return msg + "; " + why
	}
	if names := e.cfg.Scalers.Names(); len(names) > 0 {
		return msg + "; no scaler serves it (considered: " + strings.Join(names, ", ") + ")"
	}
	return msg
}

func unroutableMessage(r kiln.Requirement, grace time.Duration) string {
	want := "an agent without mandatory labels"
	if len(r.RunsOn) > 0 {
		want = "an agent with labels " + strings.Join(r.RunsOn, ", ")
	}
	if len(r.Exclude) > 0 {
		want += " and without " + strings.Join(r.Exclude, ", ")
	}
	return fmt.Sprintf("unroutable: for %s no connected agent, and no agent seen in the last %s, is %s", grace.Round(time.Second), knownAgentWindow, want)
}

// sweepCancelGrace forces the cancels agents did not confirm within the
// cancel grace of the request, which the store keeps with the run.
func (e *Engine) sweepCancelGrace(ctx context.Context) error {
	ids, err := e.db.Runs().CancelsOverdue(ctx, e.cfg.CancelGrace, 100)
	if err != nil {
		return err
	}
	for _, id := range ids {
		// The run is cancelling, so this Cancel is the forced one.
		if _, err := e.Cancel(ctx, id, "cancelled: the agent did not confirm the cancel in time"); err != nil && kiln.ErrorCode(err) != kiln.CodeConflict {
			return err
		}
	}
	return nil
}
