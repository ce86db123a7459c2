package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// next reads and handles one frame of a registered connection.
//
// Durable frames (job.status, step.status, log) are answered with an ack
// once they are stored — or refused for good (a stale lease): the ack means
// the orchestrator is done with every frame up to it. A frame that could
// not be stored because the store failed is never acknowledged: the
// connection closes (4006) and the agent replays it after reconnecting.
func (c *conn) next() (closeCause, bool) {
	defer c.net.Uncork() // what a handler corked, with the ack
	seq, m, cause, ok := c.decode()
	if !ok {
		return cause, false
	}
	c.pauseAck()
	a := c.agent.Load()
	if proto.Durable(m.Type()) {
		if seq <= c.lastSeq {
			return c.invalid(fmt.Sprintf("%s frame seq %d does not follow seq %d", m.Type(), seq, c.lastSeq)), false
		}
		c.lastSeq = seq
	}
	var err error
	switch m := m.(type) {
	case *proto.Heartbeat:
		c.capacity(a, m.ActiveJobs, m.Draining)
	case *proto.AgentStatus:
		c.capacity(a, m.ActiveJobs, m.Draining)
	case *proto.JobAck:
		err = c.jobAck(a, m)
	case *proto.JobReject:
		err = c.jobReject(a, m)
	case *proto.JobHeartbeat:
		c.jobHeartbeat(a, m)
	case *proto.JobStatus:
		err = c.jobStatus(a, m, seq)
	case *proto.StepStatus:
		err = c.stepStatus(a, m)
	case *proto.Log:
		err = c.logLines(a, m)
	default: // auth, register
		return c.invalid(fmt.Sprintf("%s was already sent on this connection", m.Type())), false
	}
	if err != nil {
		return c.storeFailed(a, string(m.Type()), err), false
	}
	c.ack(seq)
	return closeCause{}, true
}

// storeFailed is why a connection closes when a durable frame could not be
// stored: the agent replays it after reconnecting.
func (c *conn) storeFailed(a *agent, typ string, err error) closeCause {
	if errors.Is(err, errStopped) {
		return causeShutdown()
	}
	c.f.log.Error("fleet: storing an agent's report failed; closing the connection so the agent replays it",
		"agent_id", a.id, "type", typ, "err", err)
	c.sendError(proto.ErrInternal, "the orchestrator could not store the report; the agent will replay it")
	return closeCause{kind: "internal", code: proto.CloseInternal, reason: "internal error"}
}

// answer turns a store refusal into the agent's answer: a stale lease (or a
// job that no longer exists) is an error frame and changes nothing; a job
// that already ended is a replayed duplicate and needs no answer. Other
// errors are failures for the caller.
func (c *conn) answer(err error, what, jobID string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrStaleLease), errors.Is(err, store.ErrNotFound):
		c.f.stats.staleRefused.Add(1)
		c.sendError(proto.ErrStaleLease, fmt.Sprintf("%s refused: %s", what, kiln.ErrorMessage(err)))
		return nil
	case refusal(err):
		c.f.log.Debug("fleet: an agent's report changed nothing", "type", what, "job_id", jobID, "err", err)
		return nil
	}
	return err
}

// capacity handles what heartbeats and agent.status say about the agent.
func (c *conn) capacity(a *agent, active int, draining bool) {
	a.mu.Lock()
	freed := (a.full && active < a.maxJobs) || (a.draining && !draining && !a.drainAsked)
	if active < a.maxJobs {
		a.full = false
	}
	a.draining = draining || a.drainAsked
	a.mu.Unlock()
	if freed {
		c.f.disp.agentFree(a)
	}
}

// foreign refuses a report about a job the agent does not hold under that
// epoch — another agent's, or one it lost — as a stale lease. The store
// checks only the lease, which any agent can name.
func (c *conn) foreign(a *agent, what, jobID string, epoch int64) bool {
	if _, ok := a.holds(jobID, epoch); ok {
		return false
	}
	c.f.stats.staleRefused.Add(1)
	c.sendError(proto.ErrStaleLease, fmt.Sprintf("%s refused: the agent does not hold job %s under lease epoch %d", what, jobID, epoch))
	return true
}

// jobAck records that the agent accepted a dispatch. The write is deferred
// to the next sweep (which writes it before running the ack sweep): the
// agent's job.status running, which clears the deadline as well, normally
// follows at once and makes it moot. An acknowledgement close to its
// deadline is written now.
func (c *conn) jobAck(a *agent, m *proto.JobAck) error {
	f := c.f
	if c.foreign(a, "job.ack", m.JobID, m.LeaseEpoch) {
		return nil
	}
	l := store.Lease{JobID: m.JobID, Epoch: m.LeaseEpoch}
	if j, ok := a.holds(m.JobID, m.LeaseEpoch); ok && !j.ackDeadline.IsZero() &&
		f.now().Before(j.ackDeadline.Add(-2*f.cfg.SweepInterval)) {
		a.acked(m.JobID, m.LeaseEpoch, f)
		f.acks.add(l, a)
		return nil
	}
	err := c.f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		return store.Effects{}, tx.Jobs().Ack(ctx, l)
	})
	if err == nil {
		a.acked(m.JobID, m.LeaseEpoch, c.f)
	}
	return c.answer(err, "job.ack", m.JobID)
}

func (c *conn) jobReject(a *agent, m *proto.JobReject) error {
	if c.foreign(a, "job.reject", m.JobID, m.LeaseEpoch) {
		return nil
	}
	l := store.Lease{JobID: m.JobID, Epoch: m.LeaseEpoch}
	why := "the agent refused it (" + m.Reason + ")"
	if m.Message != "" {
		why += ": " + m.Message
	}
	// The agent's state changes first: the requeued job must not come
	// straight back to it.
	a.mu.Lock()
	if j := a.jobs[m.JobID]; j != nil && j.epoch == m.LeaseEpoch {
		delete(a.jobs, m.JobID)
	}
	switch m.Reason {
	case proto.RejectBusy:
		a.full = true
	case proto.RejectDraining:
		a.draining = true
	}
	a.mu.Unlock()
	err := c.f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		res, err := tx.Queue().Requeue(ctx, l, why)
		return res.Effects, err
	})
	return c.answer(err, "job.reject", m.JobID)
}

func (c *conn) jobHeartbeat(a *agent, m *proto.JobHeartbeat) {
	if _, ok := a.holds(m.JobID, m.LeaseEpoch); !ok {
		c.f.stats.staleRefused.Add(1)
		c.sendError(proto.ErrStaleLease, fmt.Sprintf("job.heartbeat refused: the agent does not hold job %s under lease epoch %d", m.JobID, m.LeaseEpoch))
		return
	}
	c.f.hb.add(store.Lease{JobID: m.JobID, Epoch: m.LeaseEpoch}, a)
}

func (c *conn) jobStatus(a *agent, m *proto.JobStatus, seq uint64) error {
	f := c.f
	if c.foreign(a, "job.status "+string(m.Status), m.JobID, m.LeaseEpoch) {
		return nil
	}
	l := store.Lease{JobID: m.JobID, Epoch: m.LeaseEpoch}
	if m.Status == kiln.JobRunning {
		// The reader does not wait for the start's commit: the agent's
		// next frame (a no-op job's end, at once) is handled meanwhile and
		// may commit with it. The ack covering this frame waits for it.
		o, err := f.cm.startJobAsync(l)
		if err != nil {
			return err
		}
		// The agent took the job: its job.ack's deferred write is not
		// needed (the start clears the ack deadline; a start refused or
		// lost to a failure leaves nothing for it to do), and a sweep
		// meanwhile would write it for nothing.
		a.acked(m.JobID, m.LeaseEpoch, f)
		f.acks.remove(l)
		c.gateStart(seq, o, c.startStored(a, l.JobID))
		return nil
	}
	// The job ended: its open step logs are closed and indexed in the
	// transaction that completes it.
	chunks := a.endJob(m.JobID, m.LeaseEpoch, f.logs)
	// The upload settle (B217, B218): the job's dependents are released by
	// this completion, so it waits (bounded) for the cache and artifact
	// uploads the job started, on any server. The committer checks for
	// them in the batch's transaction (one read for many completions) and
	// hands back a success that has some; it then waits here — blocking
	// only this agent's reader, only while uploads are in flight — and is
	// stored without another check.
	settle := m.Status == kiln.JobSuccess && f.cfg.Settle != nil && f.cfg.Settle.Enabled()
	// Complete-and-claim (B251): the agent's next job is claimed in the
	// transaction that stores this end — after the settle, so no
	// dependent is released, nor a next job sent, before it.
	next := a.nextAsk(m.JobID, m.LeaseEpoch)
	started := f.now()
	done := store.Completion{Lease: l, Status: m.Status, Error: m.Error, Outputs: m.Outputs}
	claimed, err := f.cm.completeJob(done, chunks, next, settle)
	if errors.Is(err, errUnsettled) {
		f.cfg.Settle.Wait(context.Background(), m.JobID) // bounded by its timeout
		claimed, err = f.cm.completeJob(done, chunks, next, false)
	}
	if err == nil || refusal(err) {
		finished, held := a.swap(m.JobID, m.LeaseEpoch, claimed)
		switch {
		case finished && a.oneJob:
			// A scaler's agent took its one job: it drains and exits,
			// and its scaler removes it.
			_ = f.Drain(a.id)
		case len(held) > 0:
			// The next job and this frame's ack leave in one write:
			// next uncorks after the ack.
			c.net.Cork()
			f.disp.claimedOnCompletion(a, held, f.now().Sub(started))
		case finished:
			f.disp.agentFree(a)
		}
	}
	return c.answer(err, "job.status "+string(m.Status), m.JobID)
}

// startStored handles the result of a job's start once its commit is
// known (startGate): nil, or why the connection must close.
func (c *conn) startStored(a *agent, jobID string) func(error) *closeCause {
	return func(err error) *closeCause {
		if err := c.answer(err, "job.status running", jobID); err != nil {
			cause := c.storeFailed(a, "job.status running", err)
			return &cause
		}
		return nil
	}
}

func (c *conn) stepStatus(a *agent, m *proto.StepStatus) error {
	f := c.f
	if c.foreign(a, "step.status", m.JobID, m.LeaseEpoch) {
		return nil
	}
	var chunk *store.Chunk
	if m.Status.Terminal() {
		chunk = a.endStep(m.JobID, m.LeaseEpoch, m.Index, f.logs)
	}
	if m.Index < 0 {
		// The checkout pseudo-step has a log but no row: the store keeps
		// the workflow's steps from index 0.
		return nil
	}
	l := store.Lease{JobID: m.JobID, Epoch: m.LeaseEpoch}
	u := store.StepUpdate{Index: m.Index, Name: m.Name, Status: m.Status, ExitCode: m.ExitCode, Error: m.Error}
	err := f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		if chunk != nil {
			if err := tx.Logs().Append(ctx, *chunk); err != nil {
				return store.Effects{}, err
			}
		}
		return store.Effects{}, tx.Jobs().UpdateSteps(ctx, l, u)
	})
	return c.answer(err, "step.status", m.JobID)
}

// linesPool holds the conversion buffers of log frames.
var linesPool = sync.Pool{New: func() any { return new([]logstore.Line) }}

// logLines stores a log frame. The lease is checked against the registry
// (the hot path never touches the database); the log store drops lines it
// already has, so a replay stores every line once.
func (c *conn) logLines(a *agent, m *proto.Log) error {
	j, ok := a.holds(m.JobID, m.LeaseEpoch)
	if !ok {
		c.f.stats.staleRefused.Add(1)
		c.sendError(proto.ErrStaleLease, fmt.Sprintf("log refused: the agent does not hold job %s under lease epoch %d", m.JobID, m.LeaseEpoch))
		return nil
	}
	p := linesPool.Get().(*[]logstore.Line)
	lines := (*p)[:0]
	for _, l := range m.Lines {
		lines = append(lines, logstore.Line(l))
	}
	ref := logstore.Ref{RunID: j.runID, JobID: m.JobID, Epoch: m.LeaseEpoch, Step: m.Step}
	n, err := c.f.logs.Append(ref, lines)
	first, last := lines[0].Seq, lines[len(lines)-1].Seq
	clear(lines)
	*p = lines[:0]
	if cap(lines) <= proto.MaxLinesPerFrame {
		linesPool.Put(p)
	}
	if err != nil {
		return fmt.Errorf("append log: %w", err)
	}
	c.f.stats.logLines.Add(uint64(n))
	a.noteLog(m.JobID, m.LeaseEpoch, m.Step, first, last)
	return nil
}

// acked records that the agent accepted a dispatch.
func (a *agent) acked(jobID string, epoch int64, f *Fleet) {
	a.mu.Lock()
	j := a.jobs[jobID]
	if j == nil || j.epoch != epoch || j.acked {
		a.mu.Unlock()
		return
	}
	j.acked = true
	sentAt := j.sentAt
	a.mu.Unlock()
	if !sentAt.IsZero() {
		f.stats.ackLatency.observe(f.now().Sub(sentAt))
	}
}

// noteLog remembers which lines of a step this connection wrote, so the
// step's file is closed and indexed when it ends.
func (a *agent) noteLog(jobID string, epoch int64, step int, first, last uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j := a.jobs[jobID]
	if j == nil || j.epoch != epoch {
		return
	}
	if j.steps == nil {
		j.steps = map[int]*stepLog{}
	}
	s := j.steps[step]
	if s == nil {
		j.steps[step] = &stepLog{first: first, last: last}
		return
	}
	s.first, s.last = min(s.first, first), max(s.last, last)
}

// endStep closes a finished step's log file and returns its chunk for the
// index: the step's file holds the lines first..last (offset and length 0:
// the whole file, one per step attempt). The store indexes steps from 0.
func (a *agent) endStep(jobID string, epoch int64, step int, logs *logstore.Store) *store.Chunk {
	a.mu.Lock()
	j := a.jobs[jobID]
	var s *stepLog
	var runID string
	if j != nil && j.epoch == epoch {
		s, runID = j.steps[step], j.runID
		delete(j.steps, step)
	}
	a.mu.Unlock()
	if s == nil {
		return nil
	}
	logs.CloseStep(logstore.Ref{RunID: runID, JobID: jobID, Epoch: epoch, Step: step})
	if step < 0 {
		return nil
	}
	return &store.Chunk{JobID: jobID, Step: step, FirstSeq: int64(s.first), LastSeq: int64(s.last)}
}

// endJob closes the step files of a job that ended and returns their
// chunks.
func (a *agent) endJob(jobID string, epoch int64, logs *logstore.Store) []store.Chunk {
	a.mu.Lock()
	j := a.jobs[jobID]
	var steps []int
	if j != nil && j.epoch == epoch {
		for s := range j.steps {
			steps = append(steps, s)
		}
	}
	a.mu.Unlock()
	var out []store.Chunk
	for _, s := range steps {
		if ch := a.endStep(jobID, epoch, s, logs); ch != nil {
			out = append(out, *ch)
		}
	}
	return out
}

// finish frees the slot of a job that ended; it reports whether the agent
// held it.
func (a *agent) finish(jobID string, epoch int64) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	j := a.jobs[jobID]
	if j == nil || j.epoch != epoch {
		return false
	}
	delete(a.jobs, jobID)
	a.full = false
	return true
}
