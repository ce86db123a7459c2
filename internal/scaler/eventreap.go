package scaler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

// reapBatch bounds the provisions one reaper pass fails.
const reapBatch = 20

// SetLeading tells the manager whether this server leads the cluster; only
// the leader reaps provisions that never arrived. Call it before Run.
func (m *Manager) SetLeading(f func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg.Leading = f
}

// reapProvisions is the event scalers' reaper, every five ticks. On the
// leader only (B150): an event spawn whose agent has not registered by its
// claim's deadline (claim_ttl after the scale-up, or after the code was
// redeemed) is released in one compare-and-set — of several servers one
// wins, and an agent registering meanwhile keeps its spawn — reported as
// scaler.failed on its job (the job's last_provisioning_error), scaled
// down with the reason spawn-timeout, and its scaler backs off. On every
// server: a spawn of its own that another server reaped is forgotten.
func (m *Manager) reapProvisions(ctx context.Context) {
	now := m.now()
	m.mu.Lock()
	if now.Before(m.reapAt) {
		m.mu.Unlock()
		return
	}
	m.reapAt = now.Add(5 * m.cfg.Tick)
	leading := m.cfg.Leading
	m.mu.Unlock()
	if leading == nil || leading() {
		un, err := m.db.Scalers().Unarrived(ctx, reapBatch)
		if err != nil {
			m.log.Warn("scaler: reading the provisions that never arrived failed", "err", err)
		}
		for _, u := range un {
			won, err := m.db.Scalers().ReapUnarrived(ctx, u.AgentID)
			if err != nil {
				m.log.Warn("scaler: reaping a provision failed", "agent_id", u.AgentID, "err", err)
				continue
			}
			if won {
				m.reaped(ctx, u)
			}
		}
		if _, err := m.db.Scalers().PruneClaims(ctx); err != nil {
			m.log.Warn("scaler: pruning claim codes failed", "err", err)
		}
	}
	m.forgetReaped(ctx, now)
}

// reaped reports a provision the reaper failed.
func (m *Manager) reaped(ctx context.Context, u store.Unarrived) {
	what := "never redeemed its claim code"
	if u.Redeemed {
		what = "redeemed its claim code but never registered"
	}
	detail := fmt.Sprintf("external provisioning for scaler %s produced no agent: the scale-up webhook was delivered, but agent %s %s by %s",
		u.Scaler, u.AgentID, what, u.Deadline.Format(time.RFC3339))
	m.mu.Lock()
	a := m.agents[u.AgentID]
	delete(m.adopting, u.AgentID)
	m.mu.Unlock()
	if a != nil { // this server's own spawn
		m.Event(a.id, EventFailed, detail)
		m.backoff(a.scaler, detail)
		m.destroy(ctx, a, "spawn-timeout")
		return
	}
	// Another server's, or a previous process's: attributed from the row.
	if h := m.cfg.Hooks.SpawnFailed; h != nil {
		h("event", u.JobID != "")
	}
	m.log.Warn("scaler spawn failed", "agent_id", u.AgentID, "backend", "event", "run_id", u.RunID, "job_id", u.JobID, "detail", detail)
	if u.JobID != "" {
		m.record(u.AgentID, u.RunID, u.JobID, EventFailed, detail, m.now())
	}
	m.backoff(u.Scaler, detail)
	m.mu.Lock()
	c := m.config(u.Scaler)
	m.mu.Unlock()
	if c != nil {
		if eb, ok := m.cfg.Backends[c.Type].(*EventBackend); ok {
			if err := eb.ScaleDownReason(ctx, *c, u.AgentID, "spawn-timeout"); err != nil {
				m.log.Warn("scaler: scale-down failed", "agent_id", u.AgentID, "err", err)
			}
		}
	}
	if m.cfg.Hooks.ScaleDown != nil {
		m.cfg.Hooks.ScaleDown(u.Scaler, "spawn-timeout")
	}
}

// backoff counts a failure of the scaler (B173).
func (m *Manager) backoff(name, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state[name]
	if st == nil {
		return
	}
	st.failures++
	st.deferUntil = m.now().Add(BackoffFor(st.failures))
	st.lastError, st.lastErrorAt = detail, m.now()
}

// forgetReaped drops this server's event spawns past their claim's ttl
// whose row another server's reaper removed: that server reported them
// and sent the scale-down.
func (m *Manager) forgetReaped(ctx context.Context, now time.Time) {
	m.mu.Lock()
	var old []*managed
	for _, a := range m.agents {
		c := m.config(a.scaler)
		if a.state == store.SpawnSpawning && a.inst != nil && external(a.inst) && c != nil && now.Sub(a.startedAt) > c.ClaimTTL {
			old = append(old, a)
		}
	}
	m.mu.Unlock()
	for _, a := range old {
		if _, err := m.db.Scalers().Get(ctx, a.id); !errors.Is(err, store.ErrNotFound) {
			continue
		}
		m.mu.Lock()
		if a.destroyed {
			m.mu.Unlock()
			continue
		}
		a.destroyed = true
		delete(m.agents, a.id)
		delete(m.buffer, a.id)
		m.unreserveLocked(a)
		m.mu.Unlock()
		m.backoff(a.scaler, "agent "+a.id+" never arrived (reaped by the cluster's leader)")
		m.log.Info("scaler: a provision the leader reaped is forgotten", "agent_id", a.id)
		m.Wake()
	}
}
