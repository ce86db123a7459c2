package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// RunEvent is one entry of a run's timeline (run_events): the scaler
// events of the agents started for its jobs, and the moves the store
// records in the transaction that makes them (EventReleased …).
type RunEvent struct {
	ID     int64
	RunID  string
	JobID  string // "" when the event concerns the run as a whole
	At     time.Time
	Type   string
	Detail string
}

// The event types the store records where the transition happens, in its
// transaction: a job whose needs were met (or a root job of a new or
// approved run) entering the queue, a claim sending a job to an agent, a
// job going back to the queue (an agent refused it, did not acknowledge it,
// or was lost), a rerun (on the new run and the old one), a job a
// failed-jobs rerun carried over, and an approval.
const (
	EventReleased   = "job.released"
	EventDispatched = "job.dispatched"
	EventRequeued   = "job.requeued"
	EventRetried    = "job.retried" // the agent was lost; on_agent_lost: retry
	EventReused     = "job.reused"
	EventRerun      = "run.rerun"
	EventApproved   = "run.approved"
)

// event records a timeline event to be written with the transaction
// (flushEvents, one multi-row insert, before the commit).
func (t *txn) event(runID, jobID, typ, detail string) {
	t.events = append(t.events, RunEvent{RunID: runID, JobID: jobID, Type: typ, Detail: cleanDetail(detail)})
}

// cleanDetail bounds a detail and makes it text both databases store: a
// reason an agent sent may hold anything, and PostgreSQL refuses NUL and
// invalid UTF-8 (which would fail the transition's whole transaction).
func cleanDetail(s string) string {
	if len(s) > maxEventDetail {
		s = s[:maxEventDetail]
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "\uFFFD")
}

// flushEvents writes the events recorded so far in one statement.
func (t *txn) flushEvents(ctx context.Context) error {
	if len(t.events) == 0 {
		return nil
	}
	if err := t.insertRows(ctx, t.takeEvents()); err != nil {
		return fmt.Errorf("record run events: %w", err)
	}
	return nil
}

// takeEvents returns the events recorded so far as rows to insert, and
// forgets them.
func (t *txn) takeEvents() tableRows {
	rows := make([][]any, len(t.events))
	for i, ev := range t.events {
		rows[i] = []any{ev.RunID, nullString(ev.JobID), ms(t.now), ev.Type, ev.Detail}
	}
	t.events = t.events[:0]
	return tableRows{runEventsTable, rows}
}

// describeKey says in words which agents a queue key asks for.
func describeKey(key string) string {
	r := KeyRequirement(key)
	s := "any agent"
	if len(r.RunsOn) > 0 {
		s = "an agent labelled " + strings.Join(r.RunsOn, ", ")
	}
	if len(r.Exclude) > 0 {
		s += ", not " + strings.Join(r.Exclude, ", ")
	}
	if r.Fork {
		s += " (a fork's job)"
	}
	return s
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

// Fingerprint is a cheap summary of what a run's page shows: it changes
// when the run's status changes, when any of its jobs moves, is claimed,
// starts, ends or gets another pending reason, and when its timeline grows
// (sums over the run's jobs of what each move changes: a move inside the
// millisecond of the last read still changes a status's length or a
// time's presence). The dashboard's live run page reads it often and the
// whole run only when it changed.
func (r Runs) Fingerprint(ctx context.Context, runID string) (string, error) {
	var status string
	var n [8]int64
	err := r.h.reader().queryRow(ctx, `SELECT r.status, r.updated_at, COUNT(j.id),
		CAST(COALESCE(SUM(j.updated_at), 0) AS BIGINT),
		CAST(COALESCE(SUM(LENGTH(j.status)), 0) AS BIGINT),
		CAST(COALESCE(SUM(LENGTH(COALESCE(j.agent_id, ''))), 0) AS BIGINT),
		CAST(COALESCE(SUM(COALESCE(j.started_at, 0) + COALESCE(j.finished_at, 0) + COALESCE(j.pending_since, 0)), 0) AS BIGINT),
		CAST(COALESCE(SUM(LENGTH(COALESCE(j.pending_reason, '')) + LENGTH(COALESCE(j.last_provisioning_error, ''))), 0) AS BIGINT),
		(SELECT COALESCE(MAX(e.id), 0) FROM run_events e WHERE e.run_id = r.id)
		FROM runs r LEFT JOIN jobs j ON j.run_id = r.id WHERE r.id = ? GROUP BY r.id, r.status, r.updated_at`, runID).
		Scan(&status, &n[0], &n[1], &n[2], &n[3], &n[4], &n[5], &n[6], &n[7])
	if isNoRows(err) {
		return "", notFound("run %s does not exist", runID)
	}
	if err != nil {
		return "", fmt.Errorf("run fingerprint: %w", err)
	}
	return fmt.Sprint(status, n), nil
}
