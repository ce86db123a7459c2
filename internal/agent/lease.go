package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/coder/websocket"

	"github.com/kilnci/kiln/internal/proto"
)

// The agent's lease (B126). The orchestrator gives a lost agent's started
// jobs to another agent no sooner than drop_after + recovery_window after it
// last heard from it. The agent keeps running its jobs only while it can be
// sure that has not happened: for proto.AgentLease (that sum less a margin)
// after the last heartbeat the orchestrator answered, and once it knows its
// connection is gone, for recovery_window − margin after that heartbeat,
// since the orchestrator may have seen the connection end and started the
// window at once. When the lease runs out the agent stops its jobs and
// forgets them: it does not list them when it registers again, so the
// orchestrator ends them as for an agent that never came back (agent_lost,
// or one retry with on_agent_lost: retry) — never success. The lease file's
// modification time carries the deadline to the steps' supervisors, which
// kill their steps on their own when the agent is frozen.
type lease struct {
	file      string        // the lease file (executor.Config.LeaseFile); "" when steps are not the executor's
	full      time.Duration // proto.AgentLease of the orchestrator's settings
	afterLoss time.Duration // recovery_window − margin
	heard     time.Time     // when the last answered heartbeat (or the registration) was sent
	deadline  time.Time     // zero until the first registration
	timer     *time.Timer
}

// leaseFilePath is where the agent keeps its lease file: in the state
// directory, which steps cannot see, or a temporary file.
func leaseFilePath(stateDir string) (path string, remove func(), err error) {
	if stateDir != "" {
		if err := os.MkdirAll(stateDir, 0o700); err != nil {
			return "", nil, fmt.Errorf("create the state directory: %w", err)
		}
		path = filepath.Join(stateDir, "lease")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			return "", nil, fmt.Errorf("create the lease file: %w", err)
		}
		return path, func() {}, nil
	}
	f, err := os.CreateTemp("", "kiln-agent-lease-")
	if err != nil {
		return "", nil, fmt.Errorf("create the lease file: %w", err)
	}
	f.Close()
	return f.Name(), func() { os.Remove(f.Name()) }, nil
}

// leaseTimings are the lease and what is left of it after a lost
// connection, from the register.ack.
func leaseTimings(ack *proto.RegisterAck) (full, afterLoss time.Duration) {
	window, margin := proto.DefaultRecoveryWindow, proto.DefaultLeaseMargin
	if ack.DropAfterMS > 0 && ack.RecoveryWindowMS > 0 {
		window, margin = msOr(ack.RecoveryWindowMS, window), time.Duration(max(ack.LeaseMarginMS, 0))*time.Millisecond
	}
	return ack.Lease(), max(window-margin, time.Second)
}

// pingTimeout is how long the agent waits for the answer to a heartbeat's
// ping before it gives the connection up: short enough that it notices a
// dead connection while its jobs still have lease left after the loss.
func pingTimeout(afterLoss, heartbeat time.Duration) time.Duration {
	return max((afterLoss-heartbeat)/2, heartbeat, 500*time.Millisecond)
}

// startLease arms the lease at registration; sent is when the agent began
// the connection, before the orchestrator could have heard from it.
func (a *agent) startLease(ack *proto.RegisterAck, sent time.Time) {
	a.mu.Lock()
	a.lease.full, a.lease.afterLoss = leaseTimings(ack)
	a.lease.heard = sent
	a.setDeadlineLocked(sent.Add(a.lease.full))
	a.mu.Unlock()
}

// heardAt extends the lease: the orchestrator answered the heartbeat sent
// at sent on session s.
func (a *agent) heardAt(s *session, sent time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sess != s || !sent.After(a.lease.heard) {
		return
	}
	a.lease.heard = sent
	a.setDeadlineLocked(sent.Add(a.lease.full))
}

// connectionLost shortens the lease once a connection has ended, unless
// the orchestrator said it was going away (1001): it then leaves the jobs
// for its next start, which gives them drop_after + the window (B127).
func (a *agent) connectionLost(readErr error) {
	if websocket.CloseStatus(readErr) == websocket.StatusGoingAway {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease.deadline.IsZero() {
		return
	}
	if d := a.lease.heard.Add(a.lease.afterLoss); d.Before(a.lease.deadline) {
		a.setDeadlineLocked(d)
	}
}

// setDeadlineLocked moves the deadline, the lease file's time and the
// timer that ends the lease.
func (a *agent) setDeadlineLocked(d time.Time) {
	a.lease.deadline = d
	left := d.Sub(a.now())
	if a.lease.file != "" {
		wall := time.Now().Add(left)
		if err := os.Chtimes(a.lease.file, wall, wall); err != nil {
			a.log.Warn("could not write the lease file; steps may be stopped early", "err", err)
		}
	}
	if a.lease.timer != nil {
		a.lease.timer.Stop()
	}
	a.lease.timer = time.AfterFunc(max(left, 0), a.checkLease)
}

// leaseLapsedLocked reports whether the lease has run out.
func (a *agent) leaseLapsedLocked() bool {
	return !a.lease.deadline.IsZero() && !a.now().Before(a.lease.deadline)
}

// checkLease stops every job the agent still runs once its lease has run
// out; their executions are force-cancelled and nothing they reported, or
// report, is sent.
func (a *agent) checkLease() {
	a.mu.Lock()
	if !a.leaseLapsedLocked() {
		a.mu.Unlock()
		return
	}
	var execs []Execution
	var ids []string
	for _, j := range a.jobs {
		if j.done || j.dropped || j.lost {
			continue
		}
		j.lost = true
		ids = append(ids, j.id)
		a.out.discard(j.id)
		if j.exec != nil {
			execs = append(execs, j.exec)
		}
	}
	heard, full := a.lease.heard, a.lease.full
	if len(ids) > 0 {
		a.changedLocked()
	}
	a.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	a.log.Error("no word from the orchestrator for the agent's lease: stopping its jobs, which end agent_lost (or are retried) on the orchestrator",
		"jobs", ids, "last_heard", heard, "lease", full)
	for _, x := range execs {
		x.Cancel(true)
	}
}

// noLostRunning reports whether every job stopped by the lease has ended:
// the agent registers again only then, so the orchestrator never sees a
// job as free while its steps still run here.
func (a *agent) noLostRunning() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, j := range a.jobs {
		if j.lost && !j.done {
			return false
		}
	}
	return true
}

// lostSince reports whether a job the registration listed was stopped by
// the lease after the register frame was built.
func (a *agent) lostSince(reg *proto.Register) bool {
	a.checkLease()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, f := range reg.InFlight {
		if j := a.jobs[f.JobID]; j == nil || j.lost {
			return true
		}
	}
	return false
}
