package store

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// ExpiredJob is a queued job the expiry sweep ended.
type ExpiredJob struct {
	ID    string
	RunID string
	Name  string
	// LastProvisioningError is the last scaler.failed detail recorded for
	// the job ("" when none was: the column was NULL).
	LastProvisioningError string
	Status                kiln.JobStatus // timed_out_stale or unroutable
	Error                 string         // the job's terminal message
}

// ExpiryResult is what Expire did.
type ExpiryResult struct {
	Jobs []ExpiredJob
	Effects
}

// Expire ends the queued jobs whose queue timeout passed, as runrules.Expired
// decides: a job with a recorded provisioning failure ends timed_out_stale
// with that detail as its error (and as its run's failure_reason if the run
// has none); otherwise it ends unroutable when unroutable (may be nil) says
// nothing could ever run its requirement, else timed_out_stale with the
// generic queue-timeout message, leaving the run's failure_reason alone.
// unroutable runs inside the transaction: it must be quick and do no I/O.
func (q Queue) Expire(ctx context.Context, unroutable func(kiln.Requirement) bool) (ExpiryResult, error) {
	var res ExpiryResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = ExpiryResult{}
		now := ms(t.now)
		rows, err := t.query(ctx, `SELECT id, run_id, name, queue_key, COALESCE(last_provisioning_error, ''), queued_at, expires_at
			FROM jobs WHERE status = 'queued' AND expires_at <= ? ORDER BY expires_at LIMIT ?`, now, sweepBatch)
		if err != nil {
			return fmt.Errorf("expire: %w", err)
		}
		type expiring struct {
			ExpiredJob
			key             string
			queued, expires int64
		}
		var xs []expiring
		var cs []candidate
		for rows.Next() {
			var x expiring
			if err := rows.Scan(&x.ID, &x.RunID, &x.Name, &x.key, &x.LastProvisioningError, &x.queued, &x.expires); err != nil {
				rows.Close()
				return err
			}
			xs = append(xs, x)
			cs = append(cs, candidate{ID: x.ID, RunID: x.RunID})
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(xs) == 0 {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		for _, x := range xs {
			req := KeyRequirement(x.key)
			out := runrules.Expired(runrules.Expiring{Requirement: req, LastProvisioningError: x.LastProvisioningError,
				Unroutable: unroutable != nil && unroutable(req), Waited: time.Duration(x.expires-x.queued) * time.Millisecond})
			m, msg := mExpire, out.Reason
			if out.Verdict == runrules.Unroute {
				m = mUnroutable
			}
			moved, err := t.move(ctx, m, change{ids: []string{x.ID}, where: "AND expires_at <= ?", wargs: []any{now}, err: msg})
			if err != nil {
				return err
			}
			if len(moved) == 0 {
				continue
			}
			if out.RunFailure != "" {
				if _, err := t.exec(ctx, "UPDATE runs SET failure_reason = ?, updated_at = ? WHERE id = ? AND failure_reason IS NULL",
					out.RunFailure, now, x.RunID); err != nil {
					return err
				}
			}
			x.Status, x.Error = m.to, msg
			res.Jobs = append(res.Jobs, x.ExpiredJob)
		}
		return nil
	})
	res.Effects = eff
	return res, err
}

// MarkUnroutable ends queued jobs that no connected agent and no agent that
// could ever connect can run. message "" uses runrules.UnroutableMessage.
func (q Queue) MarkUnroutable(ctx context.Context, message string, ids ...string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		if len(ids) == 0 {
			return nil
		}
		cs, keys, err := t.queuedCandidates(ctx, "id IN ("+marks(len(ids))+")", anys(ids)...)
		if err != nil {
			return err
		}
		res.Jobs, err = t.unroute(ctx, cs, keys, func(r kiln.Requirement) string {
			if message != "" {
				return message
			}
			return runrules.UnroutableMessage(r)
		}, change{})
		return err
	})
	res.Effects = eff
	return res, err
}

// SweepUnroutable keeps, per queued job, since when no known agent could
// run it (jobs.unroutable_since), and ends unroutable the jobs for which
// that has lasted grace, with message(requirement) as their error. lost are
// the queue keys no known agent accepts now (the engine decides from the
// agents it knows): their queued jobs not marked yet are marked now, and
// the marks of every other queued job are cleared (an agent that can run it
// appeared). A job entering the queue again starts unmarked (move). Since
// the marks are in the database, a restart or another server goes on
// counting from the first sighting. Nothing is written when no key is lost
// and no job is marked: the common case costs one read of an index of
// marked jobs.
func (q Queue) SweepUnroutable(ctx context.Context, lost []string, grace time.Duration, message func(kiln.Requirement) string) (SweepResult, error) {
	if len(lost) == 0 {
		marked, err := queryStrings(ctx, q.h.reader(), "SELECT id FROM jobs WHERE status = 'queued' AND unroutable_since IS NOT NULL LIMIT 1")
		if err != nil || len(marked) == 0 {
			return SweepResult{}, err
		}
	}
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		lostIn, lostArgs := "", anys(lost)
		if len(lost) > 0 {
			lostIn = "queue_key IN (" + marks(len(lost)) + ")"
			// Due jobs first: their runs are locked before any job row is.
			cutoff := ms(t.now.Add(-grace))
			cs, keys, err := t.queuedCandidates(ctx, "unroutable_since <= ? AND "+lostIn+" ORDER BY unroutable_since LIMIT ?",
				append(append([]any{cutoff}, lostArgs...), sweepBatch)...)
			if err != nil {
				return err
			}
			if res.Jobs, err = t.unroute(ctx, cs, keys, message, change{where: "AND unroutable_since <= ?", wargs: []any{cutoff}}); err != nil {
				return err
			}
		}
		clear := "UPDATE jobs SET unroutable_since = NULL WHERE status = 'queued' AND unroutable_since IS NOT NULL"
		if lostIn != "" {
			clear += " AND NOT " + lostIn
		}
		if _, err := t.exec(ctx, clear, lostArgs...); err != nil {
			return err
		}
		if lostIn == "" {
			return nil
		}
		_, err := t.exec(ctx, "UPDATE jobs SET unroutable_since = ? WHERE status = 'queued' AND unroutable_since IS NULL AND "+lostIn,
			append([]any{ms(t.now)}, lostArgs...)...)
		return err
	})
	res.Effects = eff
	return res, err
}

// queuedCandidates reads the queued jobs where selects, with their queue
// keys by job id.
func (t *txn) queuedCandidates(ctx context.Context, where string, args ...any) ([]candidate, map[string]string, error) {
	rows, err := t.query(ctx, "SELECT id, run_id, name, queue_key FROM jobs WHERE status = 'queued' AND "+where, args...)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var cs []candidate
	keys := map[string]string{}
	for rows.Next() {
		var c candidate
		var key string
		if err := rows.Scan(&c.ID, &c.RunID, &c.Name, &key); err != nil {
			return nil, nil, err
		}
		cs = append(cs, c)
		keys[c.ID] = key
	}
	return cs, keys, rows.Err()
}

// unroute ends queued jobs unroutable, each with message(its requirement),
// their runs locked first; c adds conditions to the compare-and-set.
func (t *txn) unroute(ctx context.Context, cs []candidate, keys map[string]string, message func(kiln.Requirement) string, c change) ([]SweptJob, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	if err := t.lockCandidates(ctx, cs); err != nil {
		return nil, err
	}
	var moved []movedJob
	for _, cand := range cs {
		c.ids, c.err = []string{cand.ID}, message(KeyRequirement(keys[cand.ID]))
		m, err := t.move(ctx, mUnroutable, c)
		if err != nil {
			return nil, err
		}
		moved = append(moved, m...)
	}
	return swept(cs, moved), nil
}
