package store

import (
	"context"
	"time"
)

// Uploads records the cache and artifact uploads servers are streaming
// into storage, so that a job's success — on whichever server it arrives,
// before or after a reconnect — can wait for the uploads the job started
// before its dependents are released (the cache-upload settle).
type Uploads struct{ h handle }

// Uploads is the accessor for uploads in flight.
func (db *DB) Uploads() Uploads { return Uploads{h: handle{db: db}} }

// Uploads is the accessor for uploads in flight inside the transaction.
func (tx *Tx) Uploads() Uploads { return Uploads{h: tx.handle()} }

// Begin records an upload a job started; End removes it.
func (u Uploads) Begin(ctx context.Context, id, jobID, kind, name string) error {
	return u.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "INSERT INTO uploads_in_flight (id, job_id, kind, name, started_at) VALUES (?, ?, ?, ?, ?)",
			id, jobID, kind, name, ms(t.now))
		return err
	})
}

// End records that an upload ended, stored or not.
func (u Uploads) End(ctx context.Context, id string) error {
	return u.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "DELETE FROM uploads_in_flight WHERE id = ?", id)
		return err
	})
}

// InFlight returns how many uploads a job started that have not ended.
func (u Uploads) InFlight(ctx context.Context, jobID string) (int, error) {
	var n int
	err := u.h.reader().queryRow(ctx, "SELECT COUNT(*) FROM uploads_in_flight WHERE job_id = ?", jobID).Scan(&n)
	return n, err
}

// InFlightAmong returns which of the jobs have an upload in flight: one
// read for a batch of completions instead of one per job.
func (u Uploads) InFlightAmong(ctx context.Context, jobIDs []string) (map[string]bool, error) {
	if len(jobIDs) == 0 {
		return nil, nil
	}
	in, args := u.h.db.dialect.oneOf("job_id", jobIDs)
	ids, err := queryStrings(ctx, u.h.reader(), "SELECT DISTINCT job_id FROM uploads_in_flight WHERE "+in, args...)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// Abandoned removes the records of uploads started before cutoff: their
// server died without ending them. It returns how many it removed.
func (u Uploads) Abandoned(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := u.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "DELETE FROM uploads_in_flight WHERE started_at < ?", ms(cutoff))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}
