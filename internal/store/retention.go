package store

import (
	"context"
	"time"
)

// Retention is what the garbage collector deletes: finished runs with
// everything of theirs, artifacts, and the webhook event log, each past its
// TTL and a bounded batch at a time. Caches have theirs in Caches
// (Unused, Delete) and uploads in Uploads (Abandoned).
type Retention struct{ h handle }

// Retention is the accessor for the garbage collector's reads and deletes.
func (db *DB) Retention() Retention { return Retention{h: handle{db: db}} }

// ExpiredRuns returns up to limit runs that finished before cutoff, oldest
// first.
func (r Retention) ExpiredRuns(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	rows, err := r.h.reader().query(ctx, `SELECT id FROM runs WHERE status IN ('success', 'failed', 'cancelled')
		AND finished_at IS NOT NULL AND finished_at < ? ORDER BY number LIMIT ?`, ms(cutoff), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out = append(out, id)
	}
	return out, rows.Err()
}

// DeleteRun deletes a finished run and every row of its jobs (steps,
// needs, log index, events, artifacts, uploads) in one transaction, and
// records it in purged_runs (RunFates); a run
// that is not finished (rerun since? never: a rerun is a new run) is left
// alone. It reports whether it deleted the run.
func (r Retention) DeleteRun(ctx context.Context, runID string) (bool, error) {
	var deleted bool
	err := r.h.write(ctx, func(t *txn) error {
		var status string
		err := t.queryRow(ctx, "SELECT status FROM runs WHERE id = ?", runID).Scan(&status)
		if isNoRows(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if status != "success" && status != "failed" && status != "cancelled" {
			return nil
		}
		const ofRun = "(SELECT id FROM jobs WHERE run_id = ?)"
		for _, q := range []string{
			"DELETE FROM steps WHERE job_id IN " + ofRun,
			"DELETE FROM log_chunks WHERE job_id IN " + ofRun,
			"DELETE FROM log_marks WHERE job_id IN " + ofRun,
			"DELETE FROM uploads_in_flight WHERE job_id IN " + ofRun,
			"DELETE FROM needs WHERE run_id = ?",
			"DELETE FROM run_events WHERE run_id = ?",
			"DELETE FROM artifacts WHERE run_id = ?",
			"DELETE FROM job_specs WHERE job_id IN " + ofRun,
			"DELETE FROM jobs WHERE run_id = ?",
			"DELETE FROM runs WHERE id = ?",
		} {
			if _, err := t.exec(ctx, q, runID); err != nil {
				return err
			}
		}
		// Every other server removes its own log files of the run once it
		// reads this (retention's local pass).
		if _, err := t.exec(ctx, "INSERT INTO purged_runs (run_id, purged_at) VALUES (?, ?) ON CONFLICT DO NOTHING", runID, ms(t.now)); err != nil {
			return err
		}
		deleted = true
		return nil
	})
	return deleted, err
}

// ExpiredArtifacts returns up to limit artifacts uploaded before cutoff,
// oldest first.
func (r Retention) ExpiredArtifacts(ctx context.Context, cutoff time.Time, limit int) ([]Artifact, error) {
	return Artifacts(r).query(ctx, "SELECT "+artifactCols+" WHERE a.created_at < ? ORDER BY a.created_at LIMIT ?", ms(cutoff), limit)
}

// DeleteArtifact deletes an artifact's row if it still points at the same
// object.
func (r Retention) DeleteArtifact(ctx context.Context, a Artifact) error {
	return r.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "DELETE FROM artifacts WHERE run_id = ? AND name = ? AND storage_key = ?", a.RunID, a.Name, a.StorageKey)
		return err
	})
}

// PurgeDeliveries deletes up to limit expired webhook dedup rows — only
// once their webhooks.dedup_ttl has passed, whatever cutoff says — and up
// to limit event-log rows received before cutoff and no longer waiting to
// be processed. It returns how many of each it deleted.
func (r Retention) PurgeDeliveries(ctx context.Context, cutoff time.Time, limit int) (dedup, events int64, err error) {
	err = r.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, `DELETE FROM delivery_dedup WHERE (source, delivery_id) IN
			(SELECT source, delivery_id FROM delivery_dedup WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`, ms(t.now), limit)
		if err != nil {
			return err
		}
		dedup, _ = res.RowsAffected()
		res, err = t.exec(ctx, `DELETE FROM deliveries WHERE id IN
			(SELECT id FROM deliveries WHERE received_at < ? AND status <> 'received' ORDER BY id LIMIT ?)`, ms(cutoff), limit)
		if err != nil {
			return err
		}
		events, _ = res.RowsAffected()
		return nil
	})
	return dedup, events, err
}
