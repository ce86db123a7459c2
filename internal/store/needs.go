package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/kilnci/kiln"
)

// The needs scheduler lives in the database: edges are rows, readiness is a
// query, and every decision commits in the transaction of the change that
// caused it. settle runs at the end of each job-changing operation and
// repeats until nothing more follows: fail_fast, dependents of finished
// groups (skip cascades included), max_parallel waves, then run roll-ups.

var (
	nonTerminal = []kiln.JobStatus{sPending, sQueued, sDispatched, sRunning, sRecovering, sCancelling}
	// inWave are the statuses that hold a max_parallel slot.
	inWave = []kiln.JobStatus{sQueued, sDispatched, sRunning, sRecovering, sCancelling}
)

type runBase struct{ run, base string }

func (t *txn) settle(ctx context.Context) error {
	for len(t.ended) > 0 {
		ended := t.ended
		t.ended = nil
		if err := t.reconcileSteps(ctx, ended); err != nil {
			return err
		}
		seen := map[runBase]bool{}
		for _, j := range ended {
			rb := runBase{j.RunID, j.Base}
			if j.FailFast && j.Status.Result() == kiln.ResultFailure && !seen[rb] {
				seen[rb] = true
				if err := t.failFast(ctx, rb, j); err != nil {
					return err
				}
			}
		}
		waves := map[runBase]int{}
		done := map[runBase]bool{}
		for _, j := range ended {
			rb := runBase{j.RunID, j.Base}
			if j.HasDependents && !done[rb] {
				done[rb] = true
				if err := t.releaseDependents(ctx, rb, waves); err != nil {
					return err
				}
			}
			if j.MaxParallel > 0 {
				waves[rb] = j.MaxParallel
			}
		}
		if err := t.releaseWaves(ctx, waves); err != nil {
			return err
		}
	}
	runs := make([]string, 0, len(t.dirty))
	for r := range t.dirty {
		runs = append(runs, r)
	}
	sort.Strings(runs)
	t.dirty = nil
	return t.rollUpRuns(ctx, runs)
}

// failFast cancels the other unfinished children of a group after one
// failed: waiting ones at once, those on agents through cancelling.
func (t *txn) failFast(ctx context.Context, rb runBase, failed movedJob) error {
	ids, err := t.ids(ctx, "SELECT id FROM jobs WHERE run_id = ? AND base = ? AND id <> ? AND status IN ("+statusList(nonTerminal)+")",
		rb.run, rb.base, failed.ID)
	if err != nil || len(ids) == 0 {
		return err
	}
	msg := fmt.Sprintf("cancelled by fail_fast: %s failed", failed.Name)
	for _, m := range []move{mCancelWaiting, mCancelRecovering, mCancelAsk} {
		c := change{ids: ids, set: "stop = 1"}
		if m.to.Terminal() {
			c.err = msg
		}
		if _, err := t.move(ctx, m, c); err != nil {
			return err
		}
	}
	return nil
}

// releaseDependents evaluates the pending dependents of a group once every
// child of the group has ended.
func (t *txn) releaseDependents(ctx context.Context, rb runBase, waves map[runBase]int) error {
	var open int
	if err := t.queryRow(ctx, "SELECT COUNT(*) FROM jobs WHERE run_id = ? AND base = ? AND status IN ("+statusList(nonTerminal)+")",
		rb.run, rb.base).Scan(&open); err != nil {
		return fmt.Errorf("needs: %w", err)
	}
	if open > 0 {
		return nil
	}
	rows, err := t.query(ctx, `SELECT j.id, j.run_id, j.name, j.base, j.matrix, j.spec, j.queue_key, j.max_parallel
		FROM needs n JOIN jobs j ON j.id = n.job_id
		WHERE n.run_id = ? AND n.upstream = ? AND j.status = 'pending' AND j.ready = 0
		ORDER BY j.idx`, rb.run, rb.base)
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
	for _, p := range cands {
		if err := t.evaluate(ctx, p, waves); err != nil {
			return err
		}
	}
	return nil
}

// evaluate decides a pending job whose needs may all have ended: not yet,
// cancelled (the run is being cancelled), skipped (an edge is unsatisfied),
// or ready — released now, or marked ready for its group's next wave.
func (t *txn) evaluate(ctx context.Context, p pendingJob, waves map[runBase]int) error {
	edges, ups, err := t.loadNeeds(ctx, p)
	if err != nil {
		return err
	}
	for _, u := range ups {
		if !u.Status.Terminal() {
			return nil
		}
	}
	cancelled, err := t.runCancelRequested(ctx, p.RunID)
	if err != nil {
		return err
	}
	if cancelled {
		_, err := t.move(ctx, mCancelWaiting, change{ids: []string{p.ID}, set: "stop = 1", err: "the run was cancelled"})
		return err
	}
	for _, e := range edges {
		if why := unsatisfied(e, ups); why != "" {
			_, err := t.move(ctx, mSkip, change{ids: []string{p.ID}, err: why})
			return err
		}
	}
	if p.MaxParallel > 0 {
		if _, err := t.exec(ctx, "UPDATE jobs SET ready = 1 WHERE id = ?", p.ID); err != nil {
			return err
		}
		waves[runBase{p.RunID, p.Base}] = p.MaxParallel
		return nil
	}
	return t.release(ctx, p, ups)
}

// unsatisfied explains why an edge is not met ("" when it is): it is met
// when every upstream child's result is accepted, or when failure is
// accepted and some child failed.
func unsatisfied(e NeedEdge, ups []UpstreamJob) string {
	anyFailed := false
	var bad []string
	for _, u := range ups {
		if u.Base != e.Job {
			continue
		}
		if u.Result == kiln.ResultFailure {
			anyFailed = true
		}
		if !slices.Contains(e.Accept, u.Result) {
			bad = append(bad, fmt.Sprintf("%s is %s", u.Name, u.Result))
		}
	}
	if len(bad) == 0 || (anyFailed && slices.Contains(e.Accept, kiln.ResultFailure)) {
		return ""
	}
	accept := make([]string, len(e.Accept))
	for i, r := range e.Accept {
		accept[i] = string(r)
	}
	return fmt.Sprintf("needs not met: %s (wanted %s)", strings.Join(bad, ", "), strings.Join(accept, " or "))
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

// releaseWaves releases the next ready children of each max_parallel group
// while the group has free slots, in creation order.
func (t *txn) releaseWaves(ctx context.Context, waves map[runBase]int) error {
	keys := make([]runBase, 0, len(waves))
	for rb := range waves {
		keys = append(keys, rb)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].run < keys[j].run || keys[i].run == keys[j].run && keys[i].base < keys[j].base
	})
	for _, rb := range keys {
		if err := t.releaseWave(ctx, rb, waves[rb]); err != nil {
			return err
		}
	}
	return nil
}

func (t *txn) releaseWave(ctx context.Context, rb runBase, maxParallel int) error {
	for {
		var active int
		if err := t.queryRow(ctx, "SELECT COUNT(*) FROM jobs WHERE run_id = ? AND base = ? AND status IN ("+statusList(inWave)+")",
			rb.run, rb.base).Scan(&active); err != nil {
			return fmt.Errorf("max_parallel: %w", err)
		}
		free := maxParallel - active
		if free <= 0 {
			break
		}
		cands, err := t.pendingJobs(ctx, "run_id = ? AND base = ? AND status = 'pending' AND ready = 1 ORDER BY idx LIMIT ?",
			rb.run, rb.base, free)
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
	const reason = "waiting for a max_parallel slot"
	_, err := t.exec(ctx, `UPDATE jobs SET pending_reason = ?, pending_since = ?
		WHERE run_id = ? AND base = ? AND status = 'pending' AND ready = 1 AND (pending_reason IS NULL OR pending_reason <> ?)`,
		reason, ms(t.now), rb.run, rb.base, reason)
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
