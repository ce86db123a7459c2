package store

import (
	"context"
	"fmt"
	"slices"

	"github.com/kilnci/kiln"
)

// maxStartBatch bounds the leases one start statement carries (two
// parameters each, well inside both databases' limits).
const maxStartBatch = 250

// Start moves a dispatched job to running (the agent began it). Repeating it
// under the same lease is a no-op.
func (j Jobs) Start(ctx context.Context, l Lease) error {
	errs, err := j.StartBatch(ctx, []Lease{l})
	if err != nil {
		return err
	}
	return errs[0]
}

// StartBatch moves dispatched jobs to running, their agents having begun
// them: one statement for many agents' starts (the fleet's committer
// gathers them), instead of a round trip each. errs[i] answers leases[i]:
// nil for a start or a repeated one, else the refusal (a stale lease, a job
// no longer held). A start moves nothing t.moved tracks (no end, no queue,
// no cancel).
func (j Jobs) StartBatch(ctx context.Context, leases []Lease) (errs []error, err error) {
	if err := mStart.legal(); err != nil {
		return nil, err
	}
	err = j.h.write(ctx, func(t *txn) error {
		errs = make([]error, len(leases))
		started := make(map[Lease]bool, len(leases))
		var pendingRuns []string
		chunk := maxStartBatch
		for from := 0; from < len(leases); from += chunk {
			runs, err := t.startChunk(ctx, leases[from:min(from+chunk, len(leases))], started)
			if err != nil {
				return err
			}
			for _, id := range runs {
				if !slices.Contains(pendingRuns, id) {
					pendingRuns = append(pendingRuns, id)
				}
			}
		}
		// A PostgreSQL claim starts its run in a second statement that
		// skips a locked run row, or the coordinator may have died between
		// the two: a run still pending is started here.
		for _, id := range pendingRuns {
			if err := t.setRunStatus(ctx, id, kiln.RunRunning, []kiln.RunStatus{kiln.RunPending}); err != nil {
				return err
			}
		}
		for i, l := range leases {
			if !started[l] {
				errs[i] = t.startRefused(ctx, l)
			}
		}
		return nil
	})
	return errs, err
}

// startChunk moves the chunk's jobs still held under their leases to
// running, marks them in started, and returns the runs of the moved jobs
// that are still pending (a run once per moved job; StartBatch dedupes). The run's status comes back with the move: one
// statement instead of the move and then a read of each run.
func (t *txn) startChunk(ctx context.Context, chunk []Lease, started map[Lease]bool) ([]string, error) {
	ids := make([]string, len(chunk))
	epochs := make([]int64, len(chunk))
	for i, l := range chunk {
		ids[i], epochs[i] = l.JobID, l.Epoch
	}
	// The ids alone, besides the pairs, let PostgreSQL estimate the rows
	// it will find (as a completion's move does): it reads them by key.
	in, inArgs := t.db.dialect.oneOf("id", ids)
	leased, pairs := t.db.dialect.pairOf("id", "lease_epoch", ids, epochs)
	args := append(append([]any{ms(t.now), ms(t.now), ms(t.now)}, inArgs...), pairs...)
	rows, err := t.query(ctx, startSQL(in+" AND "+leased), args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", mStart.name, err)
	}
	defer rows.Close()
	var pending []string
	for rows.Next() {
		var l Lease
		var runID string
		var runStatus kiln.RunStatus
		if err := rows.Scan(&l.JobID, &l.Epoch, &runID, &runStatus); err != nil {
			return nil, err
		}
		started[l] = true
		if runStatus == kiln.RunPending {
			pending = append(pending, runID)
		}
	}
	return pending, rows.Err()
}

// startSQL is a batch's start of the jobs that match named.
func startSQL(named string) string {
	return fmt.Sprintf(`UPDATE jobs SET status = '%s', updated_at = ?, ack_deadline = NULL, started_at = ?,
		last_heartbeat_at = ? WHERE %s AND %s
		RETURNING id, lease_epoch, run_id, (SELECT status FROM runs WHERE runs.id = jobs.run_id)`,
		mStart.to, listedStatus(mStart.from), named)
}

// startRefused answers a start that moved nothing: nil for a start
// repeated under the same lease, else the refusal.
func (t *txn) startRefused(ctx context.Context, l Lease) error {
	status, epoch, err := t.leaseState(ctx, l)
	if err == nil && epoch == l.Epoch && (status == sRunning || status == sCancelling) {
		return nil
	}
	return refused(l, "start", status, epoch, err)
}

// startRunsSQL moves to running the runs that the condition in (a
// dialect's oneOf on id) picks and that are still pending. Its status guard
// is written so that no index serves it: without statistics PostgreSQL read
// every pending run through runs_status to intersect them with the runs
// asked for (B159).
func startRunsSQL(in string) string {
	return "UPDATE runs SET status = '" + string(kiln.RunRunning) + "', started_at = COALESCE(started_at, ?), updated_at = ? WHERE " +
		in + " AND (status || '') = '" + string(kiln.RunPending) + "' RETURNING id, number"
}

// startPendingRuns starts the runs among runIDs that are still pending: a
// job of each began, its start stored with its end (Completion.Started).
// One statement for all of them, run by CompleteBatch while it holds the
// runs' locks (taken by its first move).
func (t *txn) startPendingRuns(ctx context.Context, runIDs []string) error {
	if len(runIDs) == 0 {
		return nil
	}
	in, inArgs := t.db.dialect.oneOf("id", runIDs)
	rows, err := t.query(ctx, startRunsSQL(in), append([]any{ms(t.now), ms(t.now)}, inArgs...)...)
	if err != nil {
		return fmt.Errorf("start the runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rc RunChange
		if err := rows.Scan(&rc.ID, &rc.Number); err != nil {
			return err
		}
		rc.Status = kiln.RunRunning
		if t.eff != nil {
			t.eff.Runs = append(t.eff.Runs, rc)
		}
	}
	return rows.Err()
}
