package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// Queue is the dispatch queue: the jobs table's queued rows, claimed by
// agents, requeued, recovered, expired, and explained by pending reasons.
type Queue struct{ h handle }

// Pending reasons, written by whoever knows why a job waits (the dispatcher,
// the scaler) and shown by the API with the time they were set.
const (
	ReasonSpawning = "spawning an agent"
)

// ReasonNoAgent says no connected agent offers the labels the job needs.
func ReasonNoAgent(req kiln.Requirement) string {
	forks := ""
	if req.Fork {
		forks = " that takes fork pull requests"
	}
	if len(req.RunsOn) == 0 {
		return "no connected agent without mandatory labels" + forks
	}
	return "no connected agent with labels " + strings.Join(req.RunsOn, ", ") + forks
}

// ReasonAgentsBusy says every matching agent is at capacity.
func ReasonAgentsBusy(n int) string {
	if n == 1 {
		return "the one matching agent is busy"
	}
	return fmt.Sprintf("all %d matching agents are busy", n)
}

// ReasonProvisioningFailed says the last attempt to start an agent failed.
func ReasonProvisioningFailed(detail string) string {
	return "provisioning failed: " + detail
}

// SetPendingReasonForKey records why the queued jobs with the routing key
// (kiln.Requirement.Key) wait, as decided at decided (zero: now): one row of
// key_reasons, whatever the length of the key's queue. A queued job shows
// it when it was decided after the job's own last change (keyReason.over):
// a job queued since, or whose provisioning error was recorded since or in
// the same millisecond, keeps its own reason until the next decision. The
// time the reason was set is kept while the reason stays the same, and an
// older decision (another coordinator's, written late) never replaces a
// newer one.
func (q Queue) SetPendingReasonForKey(ctx context.Context, key, reason string, decided time.Time) error {
	return q.h.write(ctx, func(t *txn) error {
		at := decided
		if at.IsZero() {
			at = t.now
		}
		_, err := t.exec(ctx, `INSERT INTO key_reasons (rkey, reason, since, decided) VALUES (?, ?, ?, ?)
			ON CONFLICT (rkey) DO UPDATE SET
				since = CASE WHEN key_reasons.reason = excluded.reason THEN key_reasons.since ELSE excluded.since END,
				reason = excluded.reason, decided = excluded.decided
			WHERE key_reasons.decided <= excluded.decided`, key, reason, ms(t.now), ms(at))
		return err
	})
}

// keyReason is a key's pending reason as a job read joins it (NULL when the
// job is not queued or its key has none).
type keyReason struct {
	reason         sql.NullString
	since, decided sql.NullInt64
}

// keyReasonCols and keyReasonJoin read a job's key reason (scanned into a
// keyReason and the job's updated_at); alias is the jobs table's name in
// the query.
func keyReasonCols(alias string) string {
	return fmt.Sprintf("kr.reason, kr.since, kr.decided, %s.updated_at", alias)
}

func keyReasonJoin(alias string) string {
	return fmt.Sprintf("LEFT JOIN key_reasons kr ON kr.rkey = %[1]s.queue_key AND %[1]s.status = 'queued'", alias)
}

// over reports whether the key's reason, rather than the job's own, says
// why a queued job waits: it was decided after the job's last change (a
// provisioning error recorded in the same millisecond stands, as the
// decision may not have known of it).
func (k keyReason) over(updatedAt int64, provisioningError bool) bool {
	if !k.reason.Valid {
		return false
	}
	if provisioningError {
		return updatedAt < k.decided.Int64
	}
	return updatedAt <= k.decided.Int64
}

// apply sets reason and since to the key's when it is the one that holds
// (see over); since is then the later of when the key's reason was set and
// when the job was queued.
func (k keyReason) apply(reason *string, since *time.Time, queuedAt time.Time, updatedAt int64, provisioningError bool) {
	if !k.over(updatedAt, provisioningError) {
		return
	}
	*reason = k.reason.String
	*since = fromMS(k.since)
	if queuedAt.After(*since) {
		*since = queuedAt
	}
}

// SetProvisioningError records a scaler.failed detail on a queued job (the
// job's last_provisioning_error, and its pending reason). Only failures are
// recorded; the claim that dispatches the job clears it. It reports whether
// the job was still queued.
func (q Queue) SetProvisioningError(ctx context.Context, jobID, detail string) (bool, error) {
	if detail == "" {
		return false, invalid("a provisioning error needs a detail")
	}
	var ok bool
	err := q.h.write(ctx, func(t *txn) error {
		reason := ReasonProvisioningFailed(detail)
		res, err := t.exec(ctx, `UPDATE jobs SET last_provisioning_error = ?, pending_reason = ?,
			pending_since = CASE WHEN pending_reason = ? THEN pending_since ELSE ? END, updated_at = ?
			WHERE id = ? AND status = 'queued'`, detail, reason, reason, ms(t.now), ms(t.now), jobID)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		ok = n > 0
		return nil
	})
	return ok, err
}

// Depth is the size of the queue.
type Depth struct {
	// ByStatus counts unfinished jobs by status; every unfinished status is
	// present, with 0 when empty (the queue gauges need explicit zeros).
	ByStatus map[kiln.JobStatus]int
	// ByKey counts queued jobs by routing key; ByLabel by each runs_on label
	// of those keys (a job counts once for each of its labels).
	ByKey   map[string]int
	ByLabel map[string]int
}

// Depth counts the queue.
func (q Queue) Depth(ctx context.Context) (Depth, error) {
	d := Depth{ByStatus: map[kiln.JobStatus]int{}, ByKey: map[string]int{}, ByLabel: map[string]int{}}
	for _, s := range nonTerminal {
		d.ByStatus[s] = 0
	}
	r := q.h.reader()
	rows, err := r.query(ctx, "SELECT status, COUNT(*) FROM jobs WHERE "+inActiveRuns+" AND status IN ("+statusList(nonTerminal)+") GROUP BY status")
	if err != nil {
		return d, fmt.Errorf("queue depth: %w", err)
	}
	for rows.Next() {
		var s kiln.JobStatus
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			rows.Close()
			return d, err
		}
		d.ByStatus[s] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return d, err
	}
	rows, err = r.query(ctx, "SELECT queue_key, COUNT(*) FROM jobs WHERE status = 'queued' GROUP BY queue_key")
	if err != nil {
		return d, fmt.Errorf("queue depth: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			return d, err
		}
		d.ByKey[k] = n
		for _, l := range KeyRequirement(k).RunsOn {
			d.ByLabel[l] += n
		}
	}
	return d, rows.Err()
}

// WaitingJob is a queued job, or one held for an admin's approval, and
// why it waits.
type WaitingJob struct {
	ID                    string
	Status                kiln.JobStatus // queued, or pending while its run waits for approval
	RunID                 string
	RunNumber             int64
	Workflow              string
	Name                  string
	Requirement           kiln.Requirement
	Reason                string
	Since                 time.Time // when Reason was set
	QueuedAt              time.Time
	ExpiresAt             time.Time
	Attempts              int
	LastProvisioningError string
}

// Waiting lists queued jobs and the jobs of runs held for approval (a
// fork's pull request: pending, yet waiting on a person, not on needs),
// oldest first.
func (q Queue) Waiting(ctx context.Context, limit int) ([]WaitingJob, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, err := q.h.reader().query(ctx, `SELECT j.id, j.status, j.run_id, r.number, r.workflow, j.name, j.queue_key,
		COALESCE(j.pending_reason, ''), j.pending_since, j.queued_at, j.expires_at, j.attempts,
		COALESCE(j.last_provisioning_error, ''), `+keyReasonCols("j")+`
		FROM jobs j JOIN runs r ON r.id = j.run_id `+keyReasonJoin("j")+`
		WHERE j.status = 'queued'
		   OR (j.status = 'pending' AND r.approval_reason IS NOT NULL AND r.approved_at IS NULL)
		ORDER BY j.id LIMIT ?`, limit)
	if err != nil {
		return nil, fmt.Errorf("waiting jobs: %w", err)
	}
	defer rows.Close()
	var out []WaitingJob
	for rows.Next() {
		var w WaitingJob
		var key string
		var since, queued, expires sql.NullInt64
		var kr keyReason
		var updated int64
		if err := rows.Scan(&w.ID, &w.Status, &w.RunID, &w.RunNumber, &w.Workflow, &w.Name, &key, &w.Reason,
			&since, &queued, &expires, &w.Attempts, &w.LastProvisioningError,
			&kr.reason, &kr.since, &kr.decided, &updated); err != nil {
			return nil, err
		}
		w.Requirement = KeyRequirement(key)
		w.Since, w.QueuedAt, w.ExpiresAt = fromMS(since), fromMS(queued), fromMS(expires)
		kr.apply(&w.Reason, &w.Since, w.QueuedAt, updated, w.LastProvisioningError != "")
		out = append(out, w)
	}
	return out, rows.Err()
}
