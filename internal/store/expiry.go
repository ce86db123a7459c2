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
// could ever connect can run (the dispatcher's unroutable probe decided).
// message "" uses runrules.UnroutableMessage.
func (q Queue) MarkUnroutable(ctx context.Context, message string, ids ...string) (SweepResult, error) {
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		if len(ids) == 0 {
			return nil
		}
		rows, err := t.query(ctx, "SELECT id, run_id, name, queue_key FROM jobs WHERE status = 'queued' AND id IN ("+marks(len(ids))+")", anys(ids)...)
		if err != nil {
			return err
		}
		var cs []candidate
		keys := map[string]string{}
		for rows.Next() {
			var c candidate
			var key string
			if err := rows.Scan(&c.ID, &c.RunID, &c.Name, &key); err != nil {
				rows.Close()
				return err
			}
			cs = append(cs, c)
			keys[c.ID] = key
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if err := t.lockCandidates(ctx, cs); err != nil {
			return err
		}
		var moved []movedJob
		for _, c := range cs {
			msg := message
			if msg == "" {
				msg = runrules.UnroutableMessage(KeyRequirement(keys[c.ID]))
			}
			m, err := t.move(ctx, mUnroutable, change{ids: []string{c.ID}, err: msg})
			if err != nil {
				return err
			}
			moved = append(moved, m...)
		}
		res.Jobs = swept(cs, moved)
		return nil
	})
	res.Effects = eff
	return res, err
}
