package engine

import (
	"context"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Approve lets a run held for approval (a fork pull request's) go: the
// store records by (an admin token's name) and the time, and releases the
// run's jobs through the Releaser as creating it would have; queued jobs
// wake agents, and the run's watchers hear it is pending without a hold
// (its commit status stops saying it waits for approval). A run that needs
// no approval, or was approved, cancelled or finished, is a conflict.
func (e *Engine) Approve(ctx context.Context, runID, by string) (store.Run, error) {
	res, err := e.db.Runs().Approve(ctx, runID, by)
	if err != nil {
		return store.Run{}, err
	}
	e.log.Info("run approved", "run", res.Number, "by", by, "queued", len(res.Effects.Queued))
	e.Apply(res.Effects)
	e.publish(store.RunChange{ID: runID, Number: res.Number, Status: kiln.RunPending})
	return e.db.Runs().Get(ctx, runID)
}
