package agent

import (
	"fmt"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
)

// job is one job the agent holds, from its dispatch until its final status
// is acknowledged (or the orchestrator takes it away).
type job struct {
	id, run string
	epoch   int64
	exec    Execution // nil while the job is being prepared
	// done: the execution ended and its final status (finalSeq) is queued.
	done     bool
	finalSeq uint64
	// dropped: the orchestrator no longer gives the job to this agent; what
	// it still reports is discarded.
	dropped bool
	// forceCancel: a hard stop came before the execution existed.
	forceCancel bool
	// lost: the agent's lease ran out while the job ran (B126); it is
	// stopped, and neither reported nor listed at the next registration.
	lost bool
}

// runningLocked counts the jobs that occupy a slot.
func (a *agent) runningLocked() int {
	n := 0
	for _, j := range a.jobs {
		if !j.done {
			n++
		}
	}
	return n
}

// dispatch handles a job.dispatch: refuse it (busy, draining, invalid) or
// acknowledge it at once and start it.
func (a *agent) dispatch(s *session, d *proto.Dispatch) {
	reject := func(reason, msg string) {
		a.log.Info("refused a job", "job_id", d.JobID, "reason", reason, "detail", msg)
		s.sendLogged(&proto.JobReject{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch, Reason: reason, Message: clip(msg, proto.MaxErrorLen)})
	}
	a.mu.Lock()
	if j := a.jobs[d.JobID]; j != nil {
		a.mu.Unlock()
		if j.epoch == d.LeaseEpoch && !j.dropped {
			// The same dispatch again (its ack was lost): acknowledge again.
			s.sendLogged(&proto.JobAck{JobID: d.JobID, LeaseEpoch: d.LeaseEpoch})
			return
		}
		reject(proto.RejectBusy, fmt.Sprintf("the agent still holds job %s under lease epoch %d", j.id, j.epoch))
		return
	}
	switch {
	case a.draining:
		a.mu.Unlock()
		reject(proto.RejectDraining, "the agent is draining")
		return
	case a.leaseLapsedLocked():
		a.mu.Unlock()
		reject(proto.RejectBusy, "the agent has not heard from the orchestrator within its lease")
		return
	case a.runningLocked() >= a.cfg.MaxJobs:
		a.mu.Unlock()
		reject(proto.RejectBusy, fmt.Sprintf("the agent runs %d jobs at most", a.cfg.MaxJobs))
		return
	}
	j := &job{id: d.JobID, run: d.RunID, epoch: d.LeaseEpoch}
	a.jobs[j.id] = j // holds the slot while the job is prepared
	a.mu.Unlock()

	p, err := a.cfg.Runner.Prepare(d)
	if err != nil {
		a.mu.Lock()
		delete(a.jobs, j.id)
		a.changedLocked()
		a.mu.Unlock()
		reject(proto.RejectInvalid, err.Error())
		return
	}
	// The ack leaves with the running status, in one write: the
	// orchestrator reads both at once. A failed ack is not fatal: the
	// connection is gone, and the next registration lists the job in
	// in_flight.
	a.log.Info("job accepted", "job_id", j.id, "run_id", j.run, "lease_epoch", j.epoch, "name", d.Spec.Name)
	a.out.forget(j.id) // a discard of an earlier lease ends with this one
	a.out.addStatusAfter(j.id, j.epoch, &proto.JobAck{JobID: j.id, LeaseEpoch: j.epoch},
		&proto.JobStatus{JobID: j.id, LeaseEpoch: j.epoch, Status: kiln.JobRunning, Time: a.now()})
	exec := p.Start(a.jobCtx, &jobSink{a: a, j: j})

	a.mu.Lock()
	j.exec = exec
	force := j.forceCancel || j.dropped || j.lost
	a.mu.Unlock()
	if force {
		exec.Cancel(true)
	}
	go a.await(j)
	a.sendStatus()
}

// await reports a job's end: its final status, then the freed slot.
func (a *agent) await(j *job) {
	res := j.exec.Wait()
	// A result that arrives after the lease ran out is not reported, even
	// when the agent was frozen while the step ended (B126).
	a.checkLease()
	a.mu.Lock()
	if j.lost {
		j.done = true
		a.removeLocked(j)
		a.changedLocked()
		a.mu.Unlock()
		a.log.Warn("job stopped: the agent's lease ran out", "job_id", j.id, "result", res.Status)
		a.sendStatus()
		return
	}
	a.mu.Unlock()
	st := finalStatus(res)
	st.JobID, st.LeaseEpoch, st.Time = j.id, j.epoch, a.now()
	seq := a.out.addStatus(j.id, j.epoch, st) // 0 if discarded

	a.mu.Lock()
	j.done, j.finalSeq = true, seq
	if j.dropped || seq == 0 || seq <= a.out.ackedSeq() {
		a.removeLocked(j)
	}
	a.changedLocked()
	a.mu.Unlock()
	a.log.Info("job finished", "job_id", j.id, "status", st.Status, "error", st.Error)
	a.sendStatus()
}

// removeLocked forgets a finished job.
func (a *agent) removeLocked(j *job) {
	if a.jobs[j.id] == j {
		delete(a.jobs, j.id)
	}
	if j.dropped || j.lost {
		a.out.forget(j.id)
	}
}

// acked forgets the finished jobs whose final status is now acknowledged.
func (a *agent) acked(seq uint64) {
	acked := a.out.ack(seq)
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, j := range a.jobs {
		if j.done && j.finalSeq <= acked {
			a.removeLocked(j)
		}
	}
	a.changedLocked()
}

// cancel handles a job.cancel.
func (a *agent) cancel(c *proto.Cancel) {
	a.mu.Lock()
	j := a.jobs[c.JobID]
	if j == nil || j.done || j.exec == nil || (c.LeaseEpoch != 0 && c.LeaseEpoch != j.epoch) {
		a.mu.Unlock()
		a.log.Info("ignored a cancel for a job the agent does not run", "job_id", c.JobID, "lease_epoch", c.LeaseEpoch)
		return
	}
	exec := j.exec
	a.mu.Unlock()
	a.log.Info("cancelling a job", "job_id", c.JobID, "force", c.Force, "reason", c.Reason)
	exec.Cancel(c.Force)
}

// dropLocked stops a job the orchestrator gave to someone else (or already
// finished): it is force-cancelled and nothing it reported or reports is
// sent. It returns the execution to cancel once the lock is released.
func (a *agent) dropLocked(id string) Execution {
	j := a.jobs[id]
	if j == nil {
		return nil
	}
	j.dropped = true
	a.out.discard(id)
	a.log.Warn("the orchestrator dropped a job this agent held; stopping it", "job_id", id)
	if j.done {
		a.removeLocked(j)
		return nil
	}
	return j.exec
}

// forceCancelLocked marks every job for a forced cancel and returns the
// executions to cancel once the lock is released.
func (a *agent) forceCancelLocked() []Execution {
	var execs []Execution
	for _, j := range a.jobs {
		j.forceCancel = true
		if j.exec != nil && !j.done {
			execs = append(execs, j.exec)
		}
	}
	return execs
}

// jobSink turns what a runner reports into durable frames of its job.
type jobSink struct {
	a *agent
	j *job
}

func (s *jobSink) Step(st proto.StepStatus) {
	if !cleanStep(&st) {
		s.a.log.Warn("the runner reported an invalid step status; dropped", "job_id", s.j.id, "index", st.Index, "status", st.Status)
		return
	}
	st.JobID, st.LeaseEpoch = s.j.id, s.j.epoch
	s.a.out.addStatus(s.j.id, s.j.epoch, &st)
}

func (s *jobSink) Log(step int, lines []proto.LogLine) {
	if step < -1 || step >= proto.MaxSteps {
		return
	}
	s.a.out.addLog(s.j.id, s.j.epoch, step, cleanLines(lines))
}
