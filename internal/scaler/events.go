package scaler

import (
	"context"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Event reports what a backend (or the manager) did with an agent. It is
// attributed to a job (B174, B175): the job the agent
// took wins; before that, the job it was started for; an event neither
// names waits, in order, until the agent takes a job. Every scaler.failed
// is counted and logged, attributed or not; a warm-pool agent's failure
// concerns no job.
func (m *Manager) Event(agentID, typ, detail string) {
	if !ValidEventType(typ) {
		m.log.Error("scaler: an event of an unknown type was dropped", "agent_id", agentID, "type", typ)
		return
	}
	now := m.now()
	m.mu.Lock()
	a := m.agents[agentID]
	var runID, jobID, backend string
	switch {
	case a == nil:
	case a.took != nil:
		runID, jobID = a.took.runID, a.took.jobID
	case a.jobID != "":
		runID, jobID = a.runID, a.jobID
	}
	if a != nil {
		backend = a.backend
	}
	if jobID == "" && a != nil && !a.warm {
		m.buffer[agentID] = append(m.buffer[agentID], bufferedEvent{typ: typ, detail: detail, at: now})
	}
	m.mu.Unlock()
	if typ == EventFailed {
		if backend == "" {
			backend = "unknown"
		}
		if h := m.cfg.Hooks.SpawnFailed; h != nil {
			h(backend, jobID != "")
		}
		var run, job any
		if jobID != "" {
			run, job = runID, jobID
		}
		m.log.Warn("scaler spawn failed", "agent_id", agentID, "backend", backend, "run_id", run, "job_id", job, "detail", detail)
	}
	if jobID != "" {
		m.record(agentID, runID, jobID, typ, detail, now)
	}
}

// record writes an attributed event: the run's timeline and, for a
// failure, the queued job's last provisioning error (B172).
func (m *Manager) record(agentID, runID, jobID, typ, detail string, at time.Time) {
	ctx := context.Background()
	if err := m.db.Runs().AddRunEvent(ctx, store.RunEvent{RunID: runID, JobID: jobID, At: at, Type: typ,
		Detail: detail}); err != nil {
		m.log.Warn("scaler: recording an event failed", "agent_id", agentID, "type", typ, "err", err)
	}
	if typ == EventFailed {
		if _, err := m.db.Queue().SetProvisioningError(ctx, jobID, detail); err != nil {
			m.log.Warn("scaler: recording a provisioning error failed", "job_id", jobID, "err", err)
		}
	}
}

// Status is a scaler as `kiln scalers` shows it.
type Status struct {
	Name                string
	Type                string
	Labels              kiln.Labels
	Mandatory           kiln.Labels
	Active              int // agents started by this server, spawning ones included
	Spawning            int
	MaxAgents           int
	WarmReady           int
	WarmTarget          int
	ConsecutiveFailures int
	LastError           string
	LastErrorAt         time.Time
	RetryAt             time.Time // while backing off
	Retiring            bool
}

// Statuses lists the scalers, in configuration order.
func (m *Manager) Statuses() []Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Status, 0, len(m.scalers))
	for _, c := range m.scalers {
		st := m.state[c.Name]
		s := Status{Name: c.Name, Type: c.Type, Labels: offer(c).Labels, Mandatory: c.MandatoryLabels, MaxAgents: c.MaxAgents,
			WarmTarget: c.WarmPool.Size, ConsecutiveFailures: st.failures, LastError: st.lastError,
			LastErrorAt: st.lastErrorAt, Retiring: st.retiring, WarmReady: m.warmReadyLocked(c.Name)}
		if m.now().Before(st.deferUntil) {
			s.RetryAt = st.deferUntil
		}
		for _, a := range m.agents {
			if a.scaler == c.Name {
				s.Active++
				if a.state == store.SpawnSpawning {
					s.Spawning++
				}
			}
		}
		out = append(out, s)
	}
	return out
}
