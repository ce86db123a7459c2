package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// expirySweep reads the queued jobs whose time is up, oldest deadline
// first, through jobs_queue_expiry (whose predicate its comparison implies).
const expirySweep = `SELECT id, run_id, name, queue_key, COALESCE(last_provisioning_error, ''), queued_at, expires_at
	FROM jobs WHERE status = 'queued' AND expires_at <= ? ORDER BY expires_at LIMIT ?`

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
		rows, err := t.query(ctx, expirySweep, now, sweepBatch)
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

// SweepUnroutable keeps since when no known agent accepts each queue key
// (lost_queue_keys) and ends unroutable the queued jobs for which that has
// lasted grace, with message(requirement) as their error. lost are the
// queue keys no known agent accepts now (the engine decides from the agents
// it knows): those not kept yet are kept from now, and every other key is
// forgotten (an agent that can run its jobs appeared). A job is unroutable
// since the later of its key's sighting and its own queued_at, so one
// entering the queue again starts its grace over. Since the sightings are
// in the database, a restart or another server goes on counting from the
// first one. The work is per key, not per queued job, except for the jobs
// of keys lost for a whole grace, which are the ones to end; nothing is
// written unless a key is lost or found, or has been lost for a grace: the
// common case reads the few rows of lost_queue_keys.
func (q Queue) SweepUnroutable(ctx context.Context, lost []string, grace time.Duration, message func(kiln.Requirement) string) (SweepResult, error) {
	kept, err := q.lostKeys(ctx)
	if err != nil {
		return SweepResult{}, err
	}
	lost = slices.Sorted(slices.Values(lost))
	if !sweepNeeded(kept, lost, ms(q.h.now().Add(-grace))) {
		return SweepResult{}, nil
	}
	lostArgs := anys(lost)
	var res SweepResult
	eff, err := q.h.op(ctx, func(t *txn) error {
		res = SweepResult{}
		if len(lost) == 0 {
			_, err := t.exec(ctx, "DELETE FROM lost_queue_keys")
			return err
		}
		lostIn := "queue_key IN (" + marks(len(lost)) + ")"
		if _, err := t.exec(ctx, "DELETE FROM lost_queue_keys WHERE NOT "+lostIn, lostArgs...); err != nil {
			return err
		}
		args := make([]any, 0, 2*len(lost))
		for _, k := range lost {
			args = append(args, k, ms(t.now))
		}
		if _, err := t.exec(ctx, "INSERT INTO lost_queue_keys (queue_key, since) VALUES "+
			strings.TrimSuffix(strings.Repeat("(?, ?), ", len(lost)), ", ")+" ON CONFLICT (queue_key) DO NOTHING", args...); err != nil {
			return err
		}
		cutoff := ms(t.now.Add(-grace))
		due, err := t.ids(ctx, "SELECT queue_key FROM lost_queue_keys WHERE since <= ? ORDER BY queue_key", cutoff)
		if err != nil || len(due) == 0 {
			return err
		}
		cs, keys, err := t.queuedCandidates(ctx, "queued_at <= ? AND queue_key IN ("+marks(len(due))+") LIMIT ?",
			append(append([]any{cutoff}, anys(due)...), sweepBatch)...)
		if err != nil {
			return err
		}
		res.Jobs, err = t.unroute(ctx, cs, keys, message, change{where: "AND queued_at <= ?", wargs: []any{cutoff}})
		return err
	})
	res.Effects = eff
	return res, err
}

// lostKeys reads lost_queue_keys: since when, by key.
func (q Queue) lostKeys(ctx context.Context) (map[string]int64, error) {
	rows, err := q.h.reader().query(ctx, "SELECT queue_key, since FROM lost_queue_keys")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	kept := map[string]int64{}
	for rows.Next() {
		var key string
		var since int64
		if err := rows.Scan(&key, &since); err != nil {
			return nil, err
		}
		kept[key] = since
	}
	return kept, rows.Err()
}

// sweepNeeded reports whether the unroutable sweep has anything to write:
// a key to keep or to forget, or a key lost since cutoff or earlier, whose
// jobs queued as long ago are due. Otherwise, the steady state of a key
// lost for less than a grace, the leader's sweep commits nothing.
func sweepNeeded(kept map[string]int64, lost []string, cutoff int64) bool {
	if len(kept) != len(lost) {
		return true
	}
	for _, k := range lost {
		since, ok := kept[k]
		if !ok || since <= cutoff {
			return true
		}
	}
	return false
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
