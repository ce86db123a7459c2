package store

import (
	"context"
	"database/sql"
	"time"
)

// RunFate is what the database says of a run whose log files a server
// keeps in its own data directory (retention's local pass).
type RunFate struct {
	// Purged: the garbage collector deleted the run (purged_runs).
	Purged bool
	// Finished: the run exists and is finished, since FinishedAt; a
	// finished run is final (a rerun is a new run), so its logs no longer
	// grow.
	Finished   bool
	FinishedAt time.Time
}

// RunFates reports the fate of each run id the database knows, as a run
// or as a purged run; an id it knows neither way is absent from the map
// (logs of another database's runs: never deleted on its word).
func (r Retention) RunFates(ctx context.Context, ids []string) (map[string]RunFate, error) {
	out := make(map[string]RunFate, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), 500)
		args := anys(ids[:n])
		rows, err := r.h.reader().query(ctx, "SELECT id, status, finished_at FROM runs WHERE id IN ("+marks(n)+")", args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id, status string
			var finished sql.NullInt64
			if err := rows.Scan(&id, &status, &finished); err != nil {
				rows.Close()
				return nil, err
			}
			done := (status == "success" || status == "failed" || status == "cancelled") && finished.Valid
			out[id] = RunFate{Finished: done, FinishedAt: fromMS(finished)}
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		rows, err = r.h.reader().query(ctx, "SELECT run_id FROM purged_runs WHERE run_id IN ("+marks(n)+")", args...)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return nil, err
			}
			out[id] = RunFate{Purged: true}
		}
		if err := rows.Close(); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}

// ForgetPurged deletes up to limit purged_runs rows written before cutoff
// (every server had the time to remove its files of those runs) and says
// how many it deleted.
func (r Retention) ForgetPurged(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	var n int64
	err := r.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, `DELETE FROM purged_runs WHERE run_id IN
			(SELECT run_id FROM purged_runs WHERE purged_at < ? ORDER BY purged_at LIMIT ?)`, ms(cutoff), limit)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
