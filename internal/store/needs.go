package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// The needs scheduler lives in the database: edges are rows, readiness is a
// query, and every decision commits in the transaction of the change that
// caused it. The decisions themselves are internal/runrules': this file loads
// the state each rule reads and applies what it decides. settle runs at the
// end of each job-changing operation and repeats until nothing more follows:
// fail_fast, dependents of finished groups (skip cascades included),
// max_parallel waves, then run roll-ups.

var (
	nonTerminal = []kiln.JobStatus{sPending, sQueued, sDispatched, sRunning, sRecovering, sCancelling}
	// inWave are the statuses that hold a max_parallel slot.
	inWave = runrules.SlotHolders()
)

func (t *txn) settle(ctx context.Context) error {
	var steps []stmt
	for len(t.ended) > 0 {
		ended := t.ended
		t.ended = nil
		steps = append(steps, t.stepEnds(ended)...)
		next := runrules.AfterEnded(ended)
		for _, failed := range next.FailFast {
			if err := t.failFast(ctx, failed); err != nil {
				return err
			}
		}
		for _, g := range next.Dependents {
			if err := t.releaseDependents(ctx, g, next.Waves); err != nil {
				return err
			}
		}
		if err := t.releaseWaves(ctx, next.Waves); err != nil {
			return err
		}
	}
	runs := make([]string, 0, len(t.dirty))
	for r := range t.dirty {
		runs = append(runs, r)
	}
	sort.Strings(runs)
	t.dirty = nil
	return t.rollUpRuns(ctx, runs, steps)
}

// failFast stops the other unfinished children of a group after one failed.
// The stop mark goes first and reads the siblings back locked, so a claim
// racing on PostgreSQL is either seen (and the job asked to cancel) or kept
// out by the mark.
func (t *txn) failFast(ctx context.Context, failed runrules.Ended) error {
	siblings, err := t.stopMark(ctx, "run_id = ? AND base = ? AND id <> ?", failed.RunID, failed.Base, failed.ID)
	if err != nil {
		return fmt.Errorf("fail_fast: %w", err)
	}
	_, err = t.stop(ctx, siblings, runrules.FailFastMessage(failed.Name))
	return err
}

// jobStatus is a job and the status it was read in.
type jobStatus struct {
	id     string
	status kiln.JobStatus
}

// stopMark sets the stop mark of the unfinished jobs where selects and
// returns them as they are now. Marking first reads them back under row
// locks, so a claim racing on PostgreSQL is either seen (the job is on an
// agent) or kept out by the mark.
func (t *txn) stopMark(ctx context.Context, where string, args ...any) ([]jobStatus, error) {
	rows, err := t.query(ctx, "UPDATE jobs SET stop = 1 WHERE "+where+" AND status IN ("+statusList(nonTerminal)+") RETURNING id, status", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []jobStatus
	for rows.Next() {
		var j jobStatus
		if err := rows.Scan(&j.id, &j.status); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, rows.Err()
}

// stop applies runrules.StopFor to stop-marked jobs: those no agent runs are
// cancelled with msg, those on agents move to cancelling.
func (t *txn) stop(ctx context.Context, jobs []jobStatus, msg string) ([]movedJob, error) {
	var waiting, recovering, ask []string
	for _, j := range jobs {
		switch runrules.StopFor(j.status) {
		case runrules.StopNow:
			if j.status == sRecovering {
				recovering = append(recovering, j.id)
			} else {
				waiting = append(waiting, j.id)
			}
		case runrules.StopAsk:
			ask = append(ask, j.id)
		}
	}
	var out []movedJob
	for _, m := range []struct {
		mv  move
		ids []string
	}{{mCancelWaiting, waiting}, {mCancelRecovering, recovering}, {mCancelAsk, ask}} {
		if len(m.ids) == 0 {
			continue
		}
		moved, err := t.move(ctx, m.mv, change{ids: m.ids, err: msg})
		if err != nil {
			return nil, err
		}
		out = append(out, moved...)
	}
	return out, nil
}

// releaseDependents decides the pending dependents of a group once every
// child of the group has ended.
func (t *txn) releaseDependents(ctx context.Context, g runrules.Group, waves runrules.Waves) error {
	var open int
	if err := t.queryRow(ctx, "SELECT COUNT(*) FROM jobs WHERE run_id = ? AND base = ? AND status IN ("+statusList(nonTerminal)+")",
		g.RunID, g.Base).Scan(&open); err != nil {
		return fmt.Errorf("needs: %w", err)
	}
	if open > 0 {
		return nil
	}
	rows, err := t.query(ctx, `SELECT j.id, j.run_id, j.name, j.base, j.matrix, `+specOf("j")+`, j.queue_key, j.max_parallel
		FROM needs n JOIN jobs j ON j.id = n.job_id
		WHERE n.run_id = ? AND n.upstream = ? AND j.status = 'pending' AND j.ready = 0
		ORDER BY j.idx`, g.RunID, g.Base)
	if err != nil {
		return fmt.Errorf("needs: %w", err)
	}
	var cands []pendingJob
	for rows.Next() {
		p, err := scanPending(rows)
		if err != nil {
			rows.Close()
			return err
		}
		cands = append(cands, p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	// Whether the run is being cancelled is read once, and only when some
	// dependent's needs have all ended (the only case the rule asks).
	var known, cancelled bool
	for _, p := range cands {
		edges, ups, err := t.loadNeeds(ctx, p)
		if err != nil {
			return err
		}
		state := pendingState(p, edges, ups)
		if !known && runrules.NeedsEnded(state.Upstream) {
			if cancelled, err = t.runCancelRequested(ctx, p.RunID); err != nil {
				return err
			}
			known = true
		}
		state.RunCancelled = cancelled
		if err := t.applyDependent(ctx, p, ups, state, waves); err != nil {
			return err
		}
	}
	return nil
}

// pendingState is what runrules.DecideDependent reads of a pending job.
func pendingState(p pendingJob, edges []NeedEdge, ups []UpstreamJob) runrules.Pending {
	state := runrules.Pending{Needs: make([]runrules.Need, len(edges)), Upstream: make([]runrules.Upstream, len(ups)), MaxParallel: p.MaxParallel}
	for i, e := range edges {
		state.Needs[i] = runrules.Need(e)
	}
	for i, u := range ups {
		state.Upstream[i] = runrules.Upstream{Name: u.Name, Base: u.Base, Status: u.Status}
	}
	return state
}

// applyDependent carries out runrules.DecideDependent for one pending job.
func (t *txn) applyDependent(ctx context.Context, p pendingJob, ups []UpstreamJob, state runrules.Pending, waves runrules.Waves) error {
	verdict, why := runrules.DecideDependent(state)
	ids := []string{p.ID}
	switch verdict {
	case runrules.CancelledWithRun:
		_, err := t.move(ctx, mCancelWaiting, change{ids: ids, set: "stop = 1", err: why})
		return err
	case runrules.Unmet:
		_, err := t.move(ctx, mSkip, change{ids: ids, err: why})
		return err
	case runrules.HoldForSlot:
		if _, err := t.exec(ctx, "UPDATE jobs SET ready = 1 WHERE id = ?", p.ID); err != nil {
			return err
		}
		waves.Add(runrules.Group{RunID: p.RunID, Base: p.Base}, p.MaxParallel)
	case runrules.Release:
		return t.release(ctx, p, ups)
	}
	return nil
}

// loadNeeds reads a job's edges and every child of the groups they name.
func (t *txn) loadNeeds(ctx context.Context, p pendingJob) ([]NeedEdge, []UpstreamJob, error) {
	rows, err := t.query(ctx, "SELECT upstream, accept FROM needs WHERE job_id = ? ORDER BY upstream", p.ID)
	if err != nil {
		return nil, nil, fmt.Errorf("load needs: %w", err)
	}
	var edges []NeedEdge
	for rows.Next() {
		var e NeedEdge
		var accept string
		if err := rows.Scan(&e.Job, &accept); err != nil {
			rows.Close()
			return nil, nil, err
		}
		e.Accept = parseResults(accept)
		edges = append(edges, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil || len(edges) == 0 {
		return edges, nil, err
	}
	bases := make([]string, len(edges))
	for i, e := range edges {
		bases[i] = e.Job
	}
	rows, err = t.query(ctx, "SELECT id, name, base, status, COALESCE(outputs, '') FROM jobs WHERE run_id = ? AND base IN ("+marks(len(bases))+") ORDER BY idx",
		append([]any{p.RunID}, anys(bases)...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("load upstream jobs: %w", err)
	}
	defer rows.Close()
	var ups []UpstreamJob
	for rows.Next() {
		var u UpstreamJob
		var outputs string
		if err := rows.Scan(&u.ID, &u.Name, &u.Base, &u.Status, &outputs); err != nil {
			return nil, nil, err
		}
		u.Result = u.Status.Result()
		if outputs != "" {
			if err := json.Unmarshal([]byte(outputs), &u.Outputs); err != nil {
				return nil, nil, fmt.Errorf("job %s outputs: %w", u.Name, err)
			}
		}
		ups = append(ups, u)
	}
	return edges, ups, rows.Err()
}

// releaseWaves fills the free slots of max_parallel groups.
func (t *txn) releaseWaves(ctx context.Context, waves runrules.Waves) error {
	for _, g := range waves.Groups() {
		if err := t.releaseWave(ctx, g, waves[g]); err != nil {
			return err
		}
	}
	return nil
}

// releaseWave releases the next ready children of a max_parallel group
// while it has free slots (runrules.FreeSlots), in creation order.
func (t *txn) releaseWave(ctx context.Context, g runrules.Group, maxParallel int) error {
	for {
		var holding int
		if err := t.queryRow(ctx, "SELECT COUNT(*) FROM jobs WHERE run_id = ? AND base = ? AND status IN ("+statusList(inWave)+")",
			g.RunID, g.Base).Scan(&holding); err != nil {
			return fmt.Errorf("max_parallel: %w", err)
		}
		free := runrules.FreeSlots(maxParallel, holding)
		if free == 0 {
			break
		}
		cands, err := t.pendingJobs(ctx, "run_id = ? AND base = ? AND status = 'pending' AND ready = 1 ORDER BY idx LIMIT ?",
			g.RunID, g.Base, free)
		if err != nil {
			return err
		}
		if len(cands) == 0 {
			return nil
		}
		ups := make([][]UpstreamJob, len(cands))
		for i, p := range cands {
			var err error
			if _, ups[i], err = t.loadNeeds(ctx, p); err != nil {
				return err
			}
		}
		if err := t.releaseAll(ctx, cands, ups); err != nil {
			return err
		}
	}
	// The rest wait for a slot; say so (keeping the time if already said).
	_, err := t.exec(ctx, `UPDATE jobs SET pending_reason = ?, pending_since = ?
		WHERE run_id = ? AND base = ? AND status = 'pending' AND ready = 1 AND (pending_reason IS NULL OR pending_reason <> ?)`,
		runrules.WaitingForSlot, ms(t.now), g.RunID, g.Base, runrules.WaitingForSlot)
	return err
}

func (t *txn) pendingJobs(ctx context.Context, where string, args ...any) ([]pendingJob, error) {
	rows, err := t.query(ctx, "SELECT "+pendingCols+" FROM jobs WHERE "+where, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []pendingJob
	for rows.Next() {
		p, err := scanPending(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// runCancelRequested reports whether a cancel was requested for the run.
func (t *txn) runCancelRequested(ctx context.Context, runID string) (bool, error) {
	var n int
	err := t.queryRow(ctx, "SELECT COUNT(*) FROM runs WHERE id = ? AND cancel_reason IS NOT NULL", runID).Scan(&n)
	return n > 0, err
}

// ids runs a query returning one string column.
func (t *txn) ids(ctx context.Context, q string, args ...any) ([]string, error) {
	return queryStrings(ctx, t, q, args...)
}

func queryStrings(ctx context.Context, q querier, sqlText string, args ...any) ([]string, error) {
	rows, err := q.query(ctx, sqlText, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

func parseResults(s string) []kiln.Result {
	var out []kiln.Result
	for _, p := range strings.Split(s, ",") {
		if p != "" {
			out = append(out, kiln.Result(p))
		}
	}
	return out
}

func formatResults(rs []kiln.Result) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = string(r)
	}
	return strings.Join(parts, ",")
}
