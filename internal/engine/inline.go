package engine

import (
	"context"

	"github.com/kilnci/kiln/internal/store"
)

// InlineClaimer is implemented by a Dispatcher that can claim jobs for its
// idle agents inside the transaction that queues them (the fleet): a
// webhook's first job then reaches an idle agent with one commit after
// the delivery's — the run's, which is also the claim's — instead of two
// (issue 17; docs/bench.md, Dispatch work per job). A job is still
// claimed only in a committed transaction, and sent only once that
// transaction committed.
type InlineClaimer interface {
	// ClaimInline claims, within tx, jobs for the idle agents it knows
	// (the queue's oldest they accept: the jobs tx just queued, or older
	// ones). It returns nil when it claims nothing (no idle agent, a
	// dispatcher pass under way); otherwise done, which the caller calls
	// exactly once, when tx's outcome is known: with committed true it
	// records the leases and sends the jobs, and returns the ids of the
	// jobs claimed and what the claim changed (runs it started); with
	// false it forgets them.
	ClaimInline(ctx context.Context, tx *store.Tx) (done func(committed bool) (jobs []string, eff store.Effects), err error)
}

// claimed is what an inline claim took: the jobs (no longer to wake
// agents for) and what the claim committed (runs it started).
type claimed struct {
	jobs    map[string]bool
	effects store.Effects
}

// unclaimed returns the queued jobs an inline claim did not take.
func (c claimed) unclaimed(queued []store.JobRef) []store.JobRef {
	if len(c.jobs) == 0 {
		return queued
	}
	out := make([]store.JobRef, 0, len(queued))
	for _, j := range queued {
		if !c.jobs[j.ID] {
			out = append(out, j)
		}
	}
	return out
}

// claimInline has the dispatcher claim within tx when it can and the runs
// queued jobs.
func (e *Engine) claimInline(ctx context.Context, tx *store.Tx, runs []store.CreatedRun) (func(bool) claimed, error) {
	ic, ok := e.d.(InlineClaimer)
	if !ok {
		return nil, nil
	}
	queued := false
	for _, r := range runs {
		queued = queued || len(r.Effects.Queued) > 0
	}
	if !queued {
		return nil, nil
	}
	done, err := ic.ClaimInline(ctx, tx)
	if done == nil {
		return nil, err
	}
	return func(committed bool) claimed {
		ids, eff := done(committed)
		c := claimed{effects: eff, jobs: make(map[string]bool, len(ids))}
		for _, id := range ids {
			c.jobs[id] = true
		}
		return c
	}, err
}
