package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/kilnci/kiln"
)

// Jobs takes what an agent reports about the jobs it holds. Every report
// carries the lease (job id and lease epoch) the agent was given at claim; a
// report under any other epoch, or for a job no longer held, is refused with
// ErrStaleLease and changes nothing.
type Jobs struct{ h handle }

// Lease names one claim of a job: the job and the epoch the claim set.
type Lease struct {
	JobID string
	Epoch int64
}

// held are the statuses in which an agent holds a job's lease.
var held = []kiln.JobStatus{sDispatched, sRunning, sCancelling}

// Get returns a job with its needs and steps.
func (j Jobs) Get(ctx context.Context, id string) (Job, error) {
	jobs, err := loadJobs(ctx, j.h.reader(), "id = ?", id)
	if err != nil {
		return Job{}, err
	}
	if len(jobs) == 0 {
		return Job{}, notFound("job %s does not exist", id)
	}
	return jobs[0], nil
}

// Ack records that the agent accepted a dispatched job: its ack deadline is
// cleared, so the ack sweep leaves it alone.
func (j Jobs) Ack(ctx context.Context, l Lease) error {
	return j.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "UPDATE jobs SET ack_deadline = NULL, updated_at = ? WHERE id = ? AND lease_epoch = ? AND status = 'dispatched'",
			ms(t.now), l.JobID, l.Epoch)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return t.refusal(ctx, l, "ack")
		}
		return nil
	})
}

// Heartbeat records that the agents are still working on the jobs. It
// returns the leases it refused (stale epoch, job no longer held), whose
// agents should abandon those jobs. Callers may debounce.
func (j Jobs) Heartbeat(ctx context.Context, leases ...Lease) (stale []Lease, err error) {
	err = j.h.write(ctx, func(t *txn) error {
		stale = nil
		for _, l := range leases {
			res, err := t.exec(ctx, "UPDATE jobs SET last_heartbeat_at = ? WHERE id = ? AND lease_epoch = ? AND status IN ("+statusList(held)+")",
				ms(t.now), l.JobID, l.Epoch)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 0 {
				stale = append(stale, l)
			}
		}
		return nil
	})
	return stale, err
}

// Completion is an agent's report that a job ended.
type Completion struct {
	Lease
	Status  kiln.JobStatus // success, failed or cancelled
	Error   string
	Outputs map[string]string
	// Settle: when the job has uploads in flight, store nothing and answer
	// ErrUnsettled (the caller waits for them, B217, and hands the
	// completion in again).
	Settle bool
	// Started: the agent's start of the job rides with its end (the fleet
	// had both in one batch). The job may still be dispatched: it moves
	// to its end in one update, with started_at set, and its run, if
	// still pending, starts — what the start alone would have done. A
	// completion left out to settle stores no start either.
	Started bool
}

// Complete ends a job under its lease and, in the same transaction, applies
// what follows (dependents released or skipped, fail_fast, waves, roll-up).
func (j Jobs) Complete(ctx context.Context, c Completion) (Effects, error) {
	errs, eff, err := j.CompleteBatch(ctx, []Completion{c})
	if err != nil {
		return eff, err
	}
	return eff, errs[0]
}

// CompleteBatch ends many jobs in one transaction (one commit, one fsync).
// errs[i] is nil, or why completion i was refused (ErrStaleLease,
// ErrConflict, ErrNotFound, ErrInvalid); refused items change nothing and do
// not stop the others. err is a database failure, after which nothing was
// committed.
func (j Jobs) CompleteBatch(ctx context.Context, cs []Completion) (errs []error, eff Effects, err error) {
	// Completions alike (same status, error and outputs — typically plain
	// successes) move in one statement; each keeps its own lease check.
	moves := map[kiln.JobStatus]move{kiln.JobSuccess: mSucceed, kiln.JobFailed: mFail, kiln.JobCancelled: mCancelReported}
	groups := map[completionGroup][]int{}
	var order []completionGroup
	errs = make([]error, len(cs))
	for i, c := range cs {
		g := completionGroup{status: c.Status}
		if _, ok := moves[c.Status]; !ok {
			errs[i] = invalid("job %s: a completion's status is success, failed or cancelled, not %q", c.JobID, c.Status)
			continue
		}
		if len(c.Outputs) > 0 {
			b, err := json.Marshal(c.Outputs)
			if err != nil {
				return nil, Effects{}, fmt.Errorf("outputs: %w", err)
			}
			g.outputs = string(b)
		}
		g.err, g.started = c.Error, c.Started
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], i)
	}
	eff, err = j.h.op(ctx, func(t *txn) error {
		// The first move's statement locks the runs of every job of the
		// batch before it reads a job's row (on PostgreSQL; one round trip
		// for both, where it was one each for the fleet's committer).
		lockFirst := make([]string, len(cs))
		for i, c := range cs {
			lockFirst[i] = c.JobID
		}
		// The runs still pending of the moved jobs whose start rode along:
		// the move reads each job's run status, so the runs' update — all
		// but always a no-op, as the claim started the run — costs a round
		// trip only when one is pending.
		var pendingRuns []string
		for _, g := range order {
			items := groups[g]
			for start := 0; start < len(items); start += 250 {
				chunk := items[start:min(start+250, len(items))]
				pending, err := t.completeChunk(ctx, moves[g.status], g, cs, chunk, lockFirst, errs)
				if err != nil {
					return err
				}
				lockFirst = nil
				for _, r := range pending {
					if !slices.Contains(pendingRuns, r) {
						pendingRuns = append(pendingRuns, r)
					}
				}
			}
		}
		return t.startPendingRuns(ctx, pendingRuns)
	})
	return errs, eff, err
}

// StepUpdate is an agent's report about one step.
type StepUpdate struct {
	Index    int
	Name     string // needed only for a step the run did not declare
	Status   kiln.StepStatus
	ExitCode *int
	Error    string
}

// UpdateSteps upserts step rows under the job's lease; a step that already
// ended is never rewritten. The report also counts as a heartbeat.
func (j Jobs) UpdateSteps(ctx context.Context, l Lease, updates ...StepUpdate) error {
	for _, u := range updates {
		if !u.Status.Valid() {
			return invalid("step %d: %q is not a step status", u.Index, u.Status)
		}
		if u.Index < 0 {
			return invalid("step index %d is negative", u.Index)
		}
	}
	return j.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "UPDATE jobs SET last_heartbeat_at = ? WHERE id = ? AND lease_epoch = ? AND status IN ("+statusList(held)+")",
			ms(t.now), l.JobID, l.Epoch)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return t.refusal(ctx, l, "step update")
		}
		for _, u := range updates {
			var started, finished, exit any
			if u.Status != kiln.StepPending {
				started = ms(t.now)
			}
			if u.Status.Terminal() {
				finished = ms(t.now)
			}
			if u.ExitCode != nil {
				exit = *u.ExitCode
			}
			if _, err := t.exec(ctx, `INSERT INTO steps (job_id, idx, name, status, exit_code, error, started_at, finished_at)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)
				ON CONFLICT (job_id, idx) DO UPDATE SET status = excluded.status, exit_code = excluded.exit_code,
					error = excluded.error, started_at = COALESCE(steps.started_at, excluded.started_at),
					finished_at = excluded.finished_at,
					name = CASE WHEN excluded.name <> '' THEN excluded.name ELSE steps.name END
				WHERE steps.status NOT IN ('success', 'failed', 'skipped', 'cancelled')`,
				l.JobID, u.Index, u.Name, string(u.Status), exit, nullString(u.Error), started, finished); err != nil {
				return fmt.Errorf("step %d: %w", u.Index, err)
			}
		}
		return nil
	})
}

// completionGroup is what completions moved by one statement share.
type completionGroup struct {
	status  kiln.JobStatus
	err     string
	outputs string
	started bool
}

// completeChunk moves the completions chunk indexes in cs, alike (g), with
// one statement, writes each one's answer into errs, and returns the runs,
// still pending, of the moved jobs whose start rode along. With lockFirst
// the statement first locks those jobs' runs (dialect.runsLockedFirst). A
// success asking to settle whose job has uploads in flight (B217) is left
// out by the statement itself, and answered ErrUnsettled.
func (t *txn) completeChunk(ctx context.Context, m move, g completionGroup, cs []Completion, chunk []int, lockFirst []string, errs []error) ([]string, error) {
	ids := make([]string, len(chunk))
	epochs := make([]int64, len(chunk))
	var settle []string
	for k, i := range chunk {
		ids[k], epochs[k] = cs[i].JobID, cs[i].Epoch
		if cs[i].Settle {
			settle = append(settle, cs[i].JobID)
		}
	}
	leased, pairs := t.db.dialect.pairOf("id", "lease_epoch", ids, epochs)
	ch := change{ids: ids, set: "outputs = ?, ack_deadline = NULL", args: []any{nullString(g.outputs)},
		where: "AND " + leased, wargs: pairs, err: g.err, runStatus: g.started, lockFirst: lockFirst}
	if g.started {
		ch.set += ", started_at = COALESCE(started_at, ?)"
		ch.args = append(ch.args, ms(t.now))
	}
	if len(settle) > 0 {
		in, inArgs := t.db.dialect.oneOf("jobs.id", settle)
		ch.where += " AND NOT (" + in + " AND EXISTS (SELECT 1 FROM uploads_in_flight u WHERE u.job_id = jobs.id))"
		ch.wargs = append(ch.wargs, inArgs...)
	}
	moved, err := t.move(ctx, m, ch)
	if err != nil {
		return nil, err
	}
	done := make(map[string]bool, len(moved))
	var pending []string
	for _, j := range moved {
		done[j.ID] = true
		if g.started && j.RunStatus == kiln.RunPending {
			pending = append(pending, j.RunID)
		}
	}
	for _, i := range chunk {
		switch {
		case done[cs[i].JobID]:
			errs[i] = nil
		case cs[i].Settle:
			errs[i] = t.leftToSettle(ctx, m, cs[i].Lease)
		default:
			errs[i] = t.refusal(ctx, cs[i].Lease, "complete")
		}
	}
	return pending, nil
}

// leftToSettle answers a success asking to settle that its move left
// alone: a job still held under the lease, in a status the move takes, was
// left out for its uploads in flight; any other is refused as refusal says.
func (t *txn) leftToSettle(ctx context.Context, m move, l Lease) error {
	status, epoch, err := t.leaseState(ctx, l)
	if err == nil && epoch == l.Epoch && slices.Contains(m.from, status) {
		return unsettledErr(l.JobID)
	}
	return refused(l, "complete", status, epoch, err)
}

// refusal explains why a lease-guarded change matched no row.
func (t *txn) refusal(ctx context.Context, l Lease, what string) error {
	status, epoch, err := t.leaseState(ctx, l)
	return refused(l, what, status, epoch, err)
}

// leaseState reads the job's status and lease epoch.
func (t *txn) leaseState(ctx context.Context, l Lease) (kiln.JobStatus, int64, error) {
	var status kiln.JobStatus
	var epoch int64
	err := t.queryRow(ctx, "SELECT status, lease_epoch FROM jobs WHERE id = ?", l.JobID).Scan(&status, &epoch)
	return status, epoch, err
}

// refused is the refusal of what under l for a job read as status and
// epoch (err: the read's failure).
func refused(l Lease, what string, status kiln.JobStatus, epoch int64, err error) error {
	if isNoRows(err) {
		return notFound("job %s does not exist", l.JobID)
	}
	if err != nil {
		return err
	}
	switch {
	case epoch != l.Epoch:
		return staleLease("%s of job %s refused: lease epoch %d is stale (the job is at epoch %d)", what, l.JobID, l.Epoch, epoch)
	case status.Terminal():
		return conflict("%s of job %s refused: the job already finished (%s)", what, l.JobID, status)
	default:
		return staleLease("%s of job %s refused: the lease is no longer held (the job is %s)", what, l.JobID, status)
	}
}
