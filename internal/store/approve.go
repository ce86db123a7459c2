package store

import (
	"context"
	"database/sql"
	"sort"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// ApproveResult is what Approve did: the jobs it released are in Effects
// (queued ones wake agents).
type ApproveResult struct {
	Number int64
	Effects
}

// Approve lets a run held for approval (NewRun.Hold) go: it records who
// approved it and when, starts the run's timeout from now, and releases
// its root jobs through the Releaser and the first wave of its max_parallel
// groups, as creating an unheld run would have, in one transaction. Its
// other jobs wait for their needs as usual. A run that needs no approval,
// was approved already, or ended (a cancel rejects a held run) is a
// conflict naming which.
func (r Runs) Approve(ctx context.Context, runID, by string) (ApproveResult, error) {
	var res ApproveResult
	eff, err := r.h.op(ctx, func(t *txn) error {
		if err := t.lockRuns(ctx, []string{runID}); err != nil {
			return err
		}
		var status kiln.RunStatus
		var reason, approvedBy sql.NullString
		var approvedAt sql.NullInt64
		err := t.queryRow(ctx, "SELECT number, status, approval_reason, approved_by, approved_at FROM runs WHERE id = ?", runID).
			Scan(&res.Number, &status, &reason, &approvedBy, &approvedAt)
		switch {
		case isNoRows(err):
			return notFound("run %s does not exist", runID)
		case err != nil:
			return err
		case !reason.Valid:
			return conflict("run #%d needs no approval", res.Number)
		case approvedAt.Valid:
			return conflict("run #%d was approved already, by %s at %s", res.Number, approvedBy.String, fromMS(approvedAt).UTC().Format("2006-01-02 15:04:05Z"))
		case status.Terminal():
			return conflict("run #%d is %s; it can no longer be approved", res.Number, status)
		case status == kiln.RunCancelling:
			return conflict("run #%d is being cancelled; it can no longer be approved", res.Number)
		}
		now := ms(t.now)
		if _, err := t.exec(ctx, `UPDATE runs SET approved_by = ?, approved_at = ?, updated_at = ?,
			deadline = CASE WHEN deadline IS NULL THEN NULL ELSE deadline - created_at + ? END
			WHERE id = ? AND approved_at IS NULL`, by, now, now, now, runID); err != nil {
			return err
		}
		t.event(runID, "", EventApproved, "approved by "+by)
		return t.releaseHeld(ctx, runID)
	})
	res.Effects = eff
	return res, err
}

// releaseHeld releases an approved run's jobs: each job with no needs gets
// the reason it would have had at creation, roots go to the Releaser, and
// max_parallel groups release their first wave.
func (t *txn) releaseHeld(ctx context.Context, runID string) error {
	needs, err := t.needsByJob(ctx, runID)
	if err != nil {
		return err
	}
	held, err := t.pendingJobs(ctx, "run_id = ? AND status = 'pending' ORDER BY idx", runID)
	if err != nil {
		return err
	}
	var roots []pendingJob
	waves := runrules.Waves{}
	for _, p := range held {
		switch {
		case len(needs[p.ID]) > 0:
			if _, err := t.exec(ctx, "UPDATE jobs SET pending_reason = ?, pending_since = ? WHERE id = ?",
				"waiting for needs: "+strings.Join(needs[p.ID], ", "), ms(t.now), p.ID); err != nil {
				return err
			}
		case p.MaxParallel > 0:
			waves.Add(runrules.Group{RunID: runID, Base: p.Base}, p.MaxParallel)
			if _, err := t.exec(ctx, "UPDATE jobs SET ready = 1, pending_reason = NULL WHERE id = ?", p.ID); err != nil {
				return err
			}
		default:
			roots = append(roots, p)
		}
	}
	if len(roots) > 0 {
		if err := t.releaseAll(ctx, roots, make([][]UpstreamJob, len(roots))); err != nil {
			return err
		}
	}
	return t.releaseWaves(ctx, waves)
}

// needsByJob maps each job of the run that has needs to the groups it
// needs, sorted.
func (t *txn) needsByJob(ctx context.Context, runID string) (map[string][]string, error) {
	rows, err := t.query(ctx, "SELECT job_id, upstream FROM needs WHERE run_id = ?", runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var job, up string
		if err := rows.Scan(&job, &up); err != nil {
			return nil, err
		}
		out[job] = append(out[job], up)
	}
	for _, ups := range out {
		sort.Strings(ups)
	}
	return out, rows.Err()
}
