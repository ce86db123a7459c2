package store

import (
	"context"
	"slices"
)

// A batch of the fleet's committer ends jobs and then claims their agents'
// next jobs. On PostgreSQL the end's last statement — the steps' settle and
// the check of which of the ended jobs' runs still have a job open — needs
// nothing from the database the claim does not: it can ride in the claim's
// statement, one round trip less per batch. The check still sees what
// committed before the runs' locks were taken (the claim's statement takes
// its snapshot after the ends' statement took them), and the claim's own
// jobs, queued in that snapshot, count as open either way.

// carriedRollUp is a roll-up check waiting for the claim that carries it.
type carriedRollUp struct {
	runs  []string
	steps []stmt
}

// DeferRollUps has the roll-up checks of the jobs this transaction ends
// wait for its next claim (Queue().ClaimFor), whose statement carries them
// (PostgreSQL; on SQLite, which has no round trips, nothing changes). The
// caller must call FlushRollUps before the transaction ends: it runs a
// check no claim carried and returns what the checks changed.
func (tx *Tx) DeferRollUps() { tx.t.deferRollUp = true }

// FlushRollUps ends DeferRollUps: it runs the roll-up check no claim
// carried, and returns the runs the checks ended, for the caller's
// Effects.
func (tx *Tx) FlushRollUps(ctx context.Context) (Effects, error) {
	t := tx.t
	err := t.flushCarried(ctx)
	eff := t.carriedEff
	t.carriedEff = Effects{}
	return eff, err
}

// deferRollUpOf reports whether rollUpRuns may leave runIDs' check to the
// next claim, and if so records it.
func (t *txn) deferRollUpOf(runIDs []string, steps []stmt) bool {
	if !t.deferRollUp || t.carried != nil || !t.db.dialect.writesInWith() || len(runIDs) == 0 || len(runIDs) > rollUpChunk {
		return false
	}
	t.carried = &carriedRollUp{runs: runIDs, steps: steps}
	return true
}

// flushCarried runs a carried check that no claim took, as rollUpRuns
// would have, and defers no more.
func (t *txn) flushCarried(ctx context.Context) error {
	t.deferRollUp = false
	c := t.carried
	if c == nil {
		return nil
	}
	t.carried = nil
	prev := t.eff
	t.eff = &t.carriedEff
	defer func() { t.eff = prev }()
	return t.rollUpRuns(ctx, c.runs, c.steps)
}

// takeCarried hands the carried check to a claim statement: the steps'
// settles as WITH items (their text ends with ", "), and the FROM and WHERE
// of a select of the runs still open (column r), with their arguments.
func (t *txn) takeCarried() (with string, withArgs []any, open string, openArgs []any, c *carriedRollUp) {
	c = t.carried
	if c == nil {
		return "", nil, "", nil, nil
	}
	t.carried = nil
	with, withArgs = withItems(c.steps)
	open, openArgs = t.openRunsFrom(c.runs)
	return with, withArgs, open, openArgs, c
}

// closeCarried ends the runs of a carried check that are not among open
// (the claim statement's answer).
func (t *txn) closeCarried(ctx context.Context, c *carriedRollUp, open []string) error {
	prev := t.eff
	t.eff = &t.carriedEff
	defer func() { t.eff = prev }()
	for _, id := range c.runs {
		if slices.Contains(open, id) {
			continue
		}
		if err := t.rollUp(ctx, id); err != nil {
			return err
		}
	}
	return nil
}
