package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// claimSQLite claims on SQLite: the transaction holds the only writer, so a
// plain UPDATE … WHERE id IN (the oldest queued ids of the accepted keys)
// cannot race another claim; concurrent claims are batched by the write
// combiner into one commit.
func claimSQLite(ctx context.Context, t *txn, keys []string, agentID string, slots int) ([]Claimed, error) {
	now, ack := ms(t.now), ms(t.now.Add(t.db.cfg.AckTimeout))
	args := []any{agentID, now, ack, now, now}
	branches := make([]string, len(keys))
	for i, k := range keys {
		branches[i] = "SELECT id FROM (" + claimBranch + ")"
		args = append(args, k, now, slots)
	}
	args = append(args, slots)
	// Each claimed job comes back with its run's status, so the runs this
	// claim starts are updated only when there are some (usually none: a
	// run starts with its first claim).
	q := "UPDATE jobs SET " + claimSet("", "?") + " WHERE status = 'queued' AND id IN (" +
		strings.Join(branches, " UNION ALL ") + " ORDER BY id LIMIT +?) RETURNING id, run_id, name, lease_epoch, attempts, " + specOf("jobs") + ", queue_key, queued_at, " +
		"(SELECT status = 'pending' FROM runs WHERE runs.id = jobs.run_id)"
	rows, err := t.query(ctx, q, args...)
	out, pending, err := scanClaimedRuns(rows, err, nil)
	if err != nil || len(out) == 0 {
		return out, err
	}
	for i := range out {
		out[i].AckDeadline = time.UnixMilli(ack).UTC()
		t.event(out[i].RunID, out[i].JobID, EventDispatched, dispatchDetail(out[i].Attempt, agentID))
	}
	started, err := t.startClaimedRuns(ctx, out, pending)
	if err != nil {
		return nil, err
	}
	markRunStarts(out, started)
	return out, nil
}

// startClaimedRuns moves the runs of claimed jobs that were still pending
// to running, and returns those it moved.
func (t *txn) startClaimedRuns(ctx context.Context, claimed []Claimed, pending map[string]bool) (map[string]bool, error) {
	var runIDs []any
	for i := range claimed {
		if id := claimed[i].RunID; pending[id] {
			pending[id] = false
			runIDs = append(runIDs, id)
		}
	}
	if len(runIDs) == 0 {
		return nil, nil
	}
	now := ms(t.now)
	rows, err := t.query(ctx, `UPDATE runs SET status = 'running', started_at = COALESCE(started_at, ?), updated_at = ?
		WHERE id IN (`+marks(len(runIDs))+`) AND status = 'pending' RETURNING id, number`, append([]any{now, now}, runIDs...)...)
	if err != nil {
		return nil, fmt.Errorf("claim: start runs: %w", err)
	}
	defer rows.Close()
	started := map[string]bool{}
	for rows.Next() {
		var rc RunChange
		if err := rows.Scan(&rc.ID, &rc.Number); err != nil {
			return nil, err
		}
		rc.Status = kiln.RunRunning
		started[rc.ID] = true
		if t.eff != nil {
			t.eff.Runs = append(t.eff.Runs, rc)
		}
	}
	return started, rows.Err()
}

// markRunStarts sets RunStarted on the first claimed job of each run in
// started, and takes those runs out of it.
func markRunStarts(claimed []Claimed, started map[string]bool) {
	for i := range claimed {
		if started[claimed[i].RunID] {
			claimed[i].RunStarted = true
			started[claimed[i].RunID] = false
		}
	}
}
