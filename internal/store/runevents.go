package store

import (
	"context"
	"fmt"
	"time"
)

// RunEvent is one entry of a run's timeline (run_events): for now, the
// scaler events of the agents started for its jobs.
type RunEvent struct {
	ID     int64
	RunID  string
	JobID  string // "" when the event concerns the run as a whole
	At     time.Time
	Type   string
	Detail string
}

// maxEventDetail bounds a stored detail: a failure's captured output is
// at most 50 lines, but a line may be long.
const maxEventDetail = 16 << 10

// AddRunEvent appends an event to its run's timeline.
func (r Runs) AddRunEvent(ctx context.Context, ev RunEvent) error {
	if ev.RunID == "" || ev.Type == "" {
		return invalid("a run event needs a run and a type")
	}
	if len(ev.Detail) > maxEventDetail {
		ev.Detail = ev.Detail[len(ev.Detail)-maxEventDetail:]
	}
	var job any
	if ev.JobID != "" {
		job = ev.JobID
	}
	return r.h.write(ctx, func(t *txn) error {
		at := ev.At
		if at.IsZero() {
			at = t.now
		}
		_, err := t.exec(ctx, "INSERT INTO run_events (run_id, job_id, at, type, detail) VALUES (?, ?, ?, ?, ?)",
			ev.RunID, job, ms(at), ev.Type, ev.Detail)
		if err != nil {
			return fmt.Errorf("add run event: %w", err)
		}
		return nil
	})
}

// Timeline returns a run's events in the order they were recorded; jobID
// ("" for all) narrows it to one job's.
func (r Runs) Timeline(ctx context.Context, runID, jobID string) ([]RunEvent, error) {
	q := "SELECT id, run_id, COALESCE(job_id, ''), at, type, detail FROM run_events WHERE run_id = ?"
	args := []any{runID}
	if jobID != "" {
		q += " AND job_id = ?"
		args = append(args, jobID)
	}
	rows, err := r.h.reader().query(ctx, q+" ORDER BY id LIMIT 10000", args...)
	if err != nil {
		return nil, fmt.Errorf("run timeline: %w", err)
	}
	defer rows.Close()
	var out []RunEvent
	for rows.Next() {
		var ev RunEvent
		var at int64
		if err := rows.Scan(&ev.ID, &ev.RunID, &ev.JobID, &at, &ev.Type, &ev.Detail); err != nil {
			return nil, err
		}
		ev.At = time.UnixMilli(at).UTC()
		out = append(out, ev)
	}
	return out, rows.Err()
}
