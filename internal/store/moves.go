package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/runrules"
)

// move is one kind of job transition the store makes: a compare-and-set from
// any of from to to. Every status change in this package goes through a move
// (the claim statement builds its SQL from mClaim), each is checked against
// kiln.CanTransition before it runs, and TestMovesAreLegal checks the table.
type move struct {
	name string
	from []kiln.JobStatus
	to   kiln.JobStatus
}

const (
	sPending    = kiln.JobPending
	sQueued     = kiln.JobQueued
	sDispatched = kiln.JobDispatched
	sRunning    = kiln.JobRunning
	sRecovering = kiln.JobRecovering
	sCancelling = kiln.JobCancelling
)

var (
	// Release step (needs met, the engine's Releaser decided).
	mRelease     = move{"release to the queue", []kiln.JobStatus{sPending}, sQueued}
	mSkip        = move{"skip (needs not met, if: false)", []kiln.JobStatus{sPending}, kiln.JobSkipped}
	mFailRelease = move{"fail at release", []kiln.JobStatus{sPending}, kiln.JobFailed}
	// Dispatch.
	mClaim = move{"claim", []kiln.JobStatus{sQueued}, sDispatched}
	mStart = move{"start", []kiln.JobStatus{sDispatched}, sRunning}
	// Completion reported by the agent holding the lease.
	mSucceed        = move{"complete: success", []kiln.JobStatus{sDispatched, sRunning, sCancelling}, kiln.JobSuccess}
	mFail           = move{"complete: failed", []kiln.JobStatus{sDispatched, sRunning, sCancelling}, kiln.JobFailed}
	mCancelReported = move{"complete: cancelled", []kiln.JobStatus{sDispatched, sRunning, sCancelling}, kiln.JobCancelled}
	// Requeue (reject, ack timeout) and its ends.
	mRequeue        = move{"requeue", []kiln.JobStatus{sDispatched}, sQueued}
	mRequeueGiveUp  = move{"requeue past max attempts", []kiln.JobStatus{sDispatched}, kiln.JobFailed}
	mRequeueStopped = move{"requeue of a stopped job", []kiln.JobStatus{sDispatched, sCancelling}, kiln.JobCancelled}
	// Cancel.
	mCancelWaiting    = move{"cancel a waiting job", []kiln.JobStatus{sPending, sQueued}, kiln.JobCancelled}
	mCancelAsk        = move{"ask the agent to cancel", []kiln.JobStatus{sDispatched, sRunning}, sCancelling}
	mCancelRecovering = move{"cancel a recovering job", []kiln.JobStatus{sRecovering}, kiln.JobCancelled}
	mCancelForce      = move{"force cancel", []kiln.JobStatus{sCancelling}, kiln.JobCancelled}
	// Agent lost and recovery window.
	mLose              = move{"agent lost", []kiln.JobStatus{sDispatched, sRunning}, sRecovering}
	mLoseCancelling    = move{"agent lost while cancelling", []kiln.JobStatus{sCancelling}, kiln.JobCancelled}
	mReclaimRunning    = move{"agent back: started job", []kiln.JobStatus{sRecovering}, sRunning}
	mReclaimDispatched = move{"agent back: unstarted job", []kiln.JobStatus{sRecovering}, sDispatched}
	mRecoverRequeue    = move{"recovery window over: requeue", []kiln.JobStatus{sRecovering}, sQueued}
	mRecoverGiveUp     = move{"recovery window over: past max attempts", []kiln.JobStatus{sRecovering}, kiln.JobFailed}
	mRecoverLost       = move{"recovery window over: agent_lost", []kiln.JobStatus{sRecovering}, kiln.JobAgentLost}
	// Sweeps.
	mStale      = move{"stale heartbeat", []kiln.JobStatus{sRunning, sCancelling}, kiln.JobTimedOutStale}
	mExpire     = move{"queue expiry", []kiln.JobStatus{sQueued}, kiln.JobTimedOutStale}
	mUnroutable = move{"unroutable", []kiln.JobStatus{sQueued}, kiln.JobUnroutable}
)

// allMoves lists every move, for the legality test and docs/states.md.
var allMoves = []move{
	mRelease, mSkip, mFailRelease, mClaim, mStart, mSucceed, mFail, mCancelReported,
	mRequeue, mRequeueGiveUp, mRequeueStopped, mCancelWaiting, mCancelAsk, mCancelRecovering,
	mCancelForce, mLose, mLoseCancelling, mReclaimRunning, mReclaimDispatched, mRecoverRequeue,
	mRecoverGiveUp, mRecoverLost, mStale, mExpire, mUnroutable,
}

func (m move) legal() error {
	for _, f := range m.from {
		if !kiln.CanTransition(f, m.to) {
			return fmt.Errorf("store: move %q: %s → %s is not a legal job transition", m.name, f, m.to)
		}
	}
	return nil
}

// listedStatus is the status check of a statement that names its rows by
// id: "status IN (…)" with the column hidden from the planner, so that
// PostgreSQL finds the rows by primary key. Every status is in the
// predicate of a partial index (jobs_agent, jobs_ack, …), and its generic
// plan for a batch's start ANDed a bitmap of such an index — thousands of
// entries at 100 agents, 0.6–1.6 ms of the committer's ~10 ms batch
// (auto_explain) — with the few rows the ids name.
func listedStatus(ss []kiln.JobStatus) string {
	return "status || '' IN (" + statusList(ss) + ")"
}

// statusList renders statuses as SQL literals. Statuses are package
// constants, never input, and literals let partial indexes apply.
func statusList(ss []kiln.JobStatus) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = "'" + string(s) + "'"
	}
	return strings.Join(parts, ", ")
}

// change is what a move sets besides the status, and which rows it targets.
type change struct {
	ids   []string
	set   string // extra assignments, e.g. "agent_id = NULL, attempts = attempts + 1"
	args  []any  // arguments of set
	where string // extra conditions, e.g. "AND lease_epoch = ?"
	wargs []any  // arguments of where
	err   string // the job's error message (terminal moves)
	// lockFirst, when set, are jobs whose runs the move's statement locks
	// before it reads a row (dialect.runsLockedFirst), as lockRunsOfJobs
	// would in a statement of its own.
	lockFirst []string
	// runStatus asks for each moved job's run status (movedJob.RunStatus)
	// in the move's own statement.
	runStatus bool
}

// movedJob is a row a move changed, as it is after the change.
type movedJob struct {
	ID            string
	RunID         string
	Name          string
	Base          string
	AgentID       string
	Epoch         int64
	MaxParallel   int
	FailFast      bool
	HasDependents bool
	Status        kiln.JobStatus
	RunStatus     kiln.RunStatus // with change.runStatus: its run's, as the move found it
}

const movedCols = "id, run_id, name, base, COALESCE(agent_id, ''), lease_epoch, max_parallel, fail_fast, has_dependents"

// move applies m to the jobs of c that are still in one of m.from (and
// match c.where), and returns those it changed. Rows in any other status
// are left alone: that is the compare-and-set. Callers must have locked the
// runs of the jobs (t.lockRuns) when the move can end a job.
func (t *txn) move(ctx context.Context, m move, c change) ([]movedJob, error) {
	if err := m.legal(); err != nil {
		return nil, err
	}
	var out []movedJob
	for start := 0; start < len(c.ids); start += 500 {
		ids := c.ids[start:min(start+500, len(c.ids))]
		var b strings.Builder
		args := []any{ms(t.now)}
		fmt.Fprintf(&b, "UPDATE jobs SET status = '%s', updated_at = ?", m.to)
		if m.to.Terminal() {
			fmt.Fprintf(&b, ", result = '%s', finished_at = ?, error = ?", m.to.Result())
			args = append(args, ms(t.now), nullString(c.err))
		}
		if c.set != "" {
			b.WriteString(", " + c.set)
			args = append(args, c.args...)
		}
		in, inArgs := t.db.dialect.oneOf("id", ids)
		fmt.Fprintf(&b, " WHERE %s AND %s %s", in, listedStatus(m.from), c.where)
		args = append(args, inArgs...)
		args = append(args, c.wargs...)
		if start == 0 && len(c.lockFirst) > 0 {
			if lock, lockArgs := t.db.dialect.runsLockedFirst(c.lockFirst); lock != "" {
				b.WriteString(" AND " + lock)
				args = append(args, lockArgs...)
			}
		}
		b.WriteString(" RETURNING " + movedCols)
		if c.runStatus {
			b.WriteString(", (SELECT status FROM runs WHERE runs.id = jobs.run_id)")
		}
		rows, err := t.query(ctx, b.String(), args...)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
		for rows.Next() {
			j := movedJob{Status: m.to}
			dest := []any{&j.ID, &j.RunID, &j.Name, &j.Base, &j.AgentID, &j.Epoch, &j.MaxParallel, &j.FailFast, &j.HasDependents}
			if c.runStatus {
				dest = append(dest, &j.RunStatus)
			}
			if err := rows.Scan(dest...); err != nil {
				rows.Close()
				return nil, err
			}
			out = append(out, j)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
	}
	for _, j := range out {
		if len(c.lockFirst) > 0 {
			t.locked[j.RunID] = true
		}
		t.moved(j)
	}
	return out, nil
}

// moved records what a change means for the rest of the transaction.
func (t *txn) moved(j movedJob) {
	ref := JobRef{ID: j.ID, RunID: j.RunID, Name: j.Name, Status: j.Status}
	switch {
	case j.Status.Terminal():
		t.ended = append(t.ended, runrules.Ended{ID: j.ID, RunID: j.RunID, Name: j.Name, Base: j.Base, Status: j.Status,
			MaxParallel: j.MaxParallel, FailFast: j.FailFast, HasDependents: j.HasDependents})
		t.markDirty(j.RunID)
		if t.eff != nil {
			t.eff.Finished = append(t.eff.Finished, ref)
		}
	case j.Status == kiln.JobQueued:
		if t.eff != nil {
			t.eff.Queued = append(t.eff.Queued, ref)
		}
	case j.Status == kiln.JobCancelling:
		if t.eff != nil {
			t.eff.Cancel = append(t.eff.Cancel, CancelTarget{JobID: j.ID, RunID: j.RunID, Name: j.Name, AgentID: j.AgentID, Epoch: j.Epoch})
		}
	}
}

func (t *txn) markDirty(runID string) {
	if t.dirty == nil {
		t.dirty = map[string]bool{}
	}
	t.dirty[runID] = true
}

// lockRuns locks the rows of runs before their jobs change (PostgreSQL);
// see txn.locked.
func (t *txn) lockRuns(ctx context.Context, runIDs []string) error {
	return t.db.dialect.lockRuns(ctx, t, runIDs)
}

// lockRunsOfJobs locks the runs the jobs belong to.
func (t *txn) lockRunsOfJobs(ctx context.Context, jobIDs []string) error {
	return t.db.dialect.lockRunsOfJobs(ctx, t, jobIDs)
}
