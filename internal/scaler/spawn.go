package scaler

import (
	"context"
	"fmt"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// demand starts agents for queued jobs that no idle agent accepts and no
// spawn serves yet, scaler by scaler, within the caps. It returns how many
// spawns it started.
func (m *Manager) demand(ctx context.Context) int {
	m.mu.Lock()
	f := m.fleet
	m.mu.Unlock()
	if f == nil {
		return 0
	}
	keys, err := m.db.Queue().Keys(ctx)
	if err != nil {
		m.log.Warn("scaler: reading the queue failed", "err", err)
		return 0
	}
	started := 0
	for _, k := range keys {
		req := store.KeyRequirement(k)
		m.mu.Lock()
		i := match(m.scalers, m.retiring, req)
		var c Config
		if i >= 0 {
			c = m.scalers[i]
		}
		m.mu.Unlock()
		if i < 0 || f.IdleAccepting(req) || m.deferred(c.Name) {
			continue
		}
		room, err := m.room(ctx, c)
		if err != nil || room <= 0 {
			continue
		}
		jobs, err := m.db.Scalers().Unserved(ctx, k, room)
		if err != nil {
			m.log.Warn("scaler: reading the jobs waiting for an agent failed", "err", err)
			continue
		}
		for _, j := range jobs {
			if err := m.spawn(ctx, c, j.ID, j.RunID); err != nil {
				if err != errNoRoom {
					m.log.Warn("scaler: starting an agent failed", "scaler", c.Name, "job_id", j.ID, "err", err)
				}
				break
			}
			started++
		}
	}
	if started > 0 {
		f.RefreshReasons()
	}
	return started
}

// deferred reports whether the scaler is backing off after failures.
func (m *Manager) deferred(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.now().Before(m.state[name].deferUntil)
}

// room is how many more agents the scaler may start now: its max_agents
// and the global cap, counting every server's spawns.
func (m *Manager) room(ctx context.Context, c Config) (int, error) {
	counts, err := m.db.Scalers().Count(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, n := range counts {
		total += n
	}
	room := min(c.MaxAgents-counts[c.Name], m.cfg.Caps.MaxAgents-total)
	if room <= 0 && m.cfg.Hooks.Refused != nil {
		m.cfg.Hooks.Refused()
	}
	return room, nil
}

// reserve books the CPU and memory of one agent against the scaler's and
// the global budgets; false when either would be exceeded.
func (m *Manager) reserve(c Config) (float64, int64, bool) {
	cpus := c.DefaultResources.CPUs
	mem, _ := ParseMemory(c.DefaultResources.Memory)
	capMem, _ := ParseMemory(c.ResourceCap.Memory)
	globalMem, _ := ParseMemory(m.cfg.Caps.Memory)
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state[c.Name]
	var allCPU float64
	var allMem int64
	for _, s := range m.state {
		allCPU += s.cpus
		allMem += s.mem
	}
	if (c.ResourceCap.CPUs > 0 && st.cpus+cpus > c.ResourceCap.CPUs) || (capMem > 0 && st.mem+mem > capMem) ||
		(m.cfg.Caps.CPUs > 0 && allCPU+cpus > m.cfg.Caps.CPUs) || (globalMem > 0 && allMem+mem > globalMem) {
		if m.cfg.Hooks.Refused != nil {
			m.cfg.Hooks.Refused()
		}
		return 0, 0, false
	}
	st.cpus += cpus
	st.mem += mem
	return cpus, mem, true
}

// spawn claims a spawn for the job ("" for a warm-pool agent) in the
// database and starts it in the background (B170).
func (m *Manager) spawn(ctx context.Context, c Config, jobID, runID string) error {
	cpus, mem, ok := m.reserve(c)
	if !ok {
		return errNoRoom
	}
	unreserve := func() {
		m.mu.Lock()
		m.state[c.Name].cpus -= cpus
		m.state[c.Name].mem -= mem
		m.mu.Unlock()
	}
	id := newAgentID(c.Type)
	labels := offer(c)
	claimed, err := m.db.Scalers().Claim(ctx, store.Spawn{AgentID: id, Scaler: c.Name, JobID: jobID, RunID: runID,
		Labels: labels.Labels, Owner: m.cfg.Instance})
	if err != nil || !claimed {
		unreserve()
		return err // another server (or an earlier pass) serves the job
	}
	// B171: a single-use token bound to this agent id and these labels.
	tk, secret, err := m.db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{
		Name: "scaler " + c.Name + ": " + id, Labels: labels.Labels, Mandatory: labels.Mandatory,
		SingleUse: true, AgentID: id, CreatedBy: "scaler", ExpiresAt: m.now().Add(c.SpawnTimeout + 7*24*time.Hour),
	})
	if err == nil {
		err = m.db.Scalers().SetToken(ctx, id, tk.ID)
	}
	if err != nil {
		unreserve()
		_, _ = m.db.Scalers().Release(context.WithoutCancel(ctx), id)
		return err
	}
	a := &managed{id: id, scaler: c.Name, backend: c.Type, jobID: jobID, runID: runID, warm: jobID == "",
		registered: make(chan struct{}), startedAt: m.now(), state: store.SpawnSpawning, cpus: cpus, mem: mem}
	m.mu.Lock()
	m.agents[id] = a
	runCtx := m.ctx
	m.mu.Unlock()
	if runCtx == nil {
		runCtx = ctx
	}
	if m.cfg.Hooks.ScaleUp != nil {
		m.cfg.Hooks.ScaleUp(c.Name)
	}
	req := SpawnRequest{AgentID: id, Labels: labels.Labels, ServerURL: c.ServerURL, Token: secret,
		CPUs: c.CPUs, Env: c.Env, Binary: c.Binary, Event: func(typ, detail string) { m.Event(id, typ, detail) }}
	if req.CPUs == 0 {
		req.CPUs = c.DefaultResources.CPUs
	}
	req.MemoryBytes, _ = ParseMemory(c.Memory)
	if req.MemoryBytes == 0 {
		req.MemoryBytes = mem
	}
	m.spawns.Go(func() { m.run(runCtx, c, a, req) })
	return nil
}

// run is one spawn: wait for a slot, start the agent, wait for it to
// register within the spawn timeout (B172).
func (m *Manager) run(ctx context.Context, c Config, a *managed, req SpawnRequest) {
	st := m.state[c.Name]
	select {
	case st.sem <- struct{}{}:
	case <-ctx.Done():
		m.destroy(context.WithoutCancel(ctx), a, "shutdown")
		return
	}
	released := false
	release := func() {
		if !released {
			released = true
			<-st.sem
		}
	}
	defer release()
	sctx, cancel := context.WithTimeout(ctx, c.SpawnTimeout)
	defer cancel()
	what := "a warm-pool agent"
	if a.jobID != "" {
		what = "an agent for job " + a.jobID
	}
	m.Event(a.id, EventProvisioning, fmt.Sprintf("scaler %s (%s) is starting %s: %s", c.Name, c.Type, what, a.id))
	inst, err := m.cfg.Backends[c.Type].Spawn(sctx, req)
	if err != nil {
		m.fail(a, err.Error())
		return
	}
	m.mu.Lock()
	a.inst = inst
	m.mu.Unlock()
	m.Event(a.id, EventConnecting, "waiting for agent "+a.id+" to register")
	select {
	case <-a.registered:
		release()
		// B174: a failure after registration is still reported, through
		// the job the agent took.
		<-inst.Exited()
		if err := inst.ExitErr(); err != nil && !m.isDestroyed(a) {
			m.Event(a.id, EventFailed, WithTail(fmt.Sprintf("agent %s exited: %v", a.id, err), inst.Tail()))
		}
	case <-inst.Exited():
		m.fail(a, WithTail(fmt.Sprintf("agent %s exited before it registered: %v", a.id, exitText(inst.ExitErr())), inst.Tail()))
	case <-sctx.Done():
		if ctx.Err() != nil {
			m.destroy(context.WithoutCancel(ctx), a, "shutdown")
			return
		}
		m.fail(a, WithTail(fmt.Sprintf("agent %s did not register within the spawn timeout (%s)", a.id, c.SpawnTimeout), inst.Tail()))
	}
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

func (m *Manager) isDestroyed(a *managed) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return a.destroyed
}

// fail ends a spawn that did not produce an agent: scaler.failed with the
// detail, the scaler backs off, the agent is removed and its job waits for
// the next spawn (B172).
func (m *Manager) fail(a *managed, detail string) {
	m.Event(a.id, EventFailed, detail)
	m.mu.Lock()
	st := m.state[a.scaler]
	st.failures++
	st.deferUntil = m.now().Add(BackoffFor(st.failures))
	st.lastError, st.lastErrorAt = detail, m.now()
	n := st.failures
	m.mu.Unlock()
	m.log.Warn("scaler: spawn failed; backing off", "scaler", a.scaler, "agent_id", a.id, "consecutive", n, "retry_in", BackoffFor(n))
	m.destroy(context.Background(), a, "spawn-failed")
}

// destroy removes an agent this process started: the backend's instance,
// the spawn row and its token, the reservation (B180). Capacity freed
// wakes the manager for the jobs still waiting.
func (m *Manager) destroy(ctx context.Context, a *managed, reason string) {
	m.mu.Lock()
	if a.destroyed {
		m.mu.Unlock()
		return
	}
	a.destroyed, a.state = true, store.SpawnDestroying
	inst := a.inst
	m.mu.Unlock()
	if inst != nil {
		if err := inst.Destroy(ctx, reason); err != nil {
			m.log.Warn("scaler: removing an agent failed", "agent_id", a.id, "err", err)
		}
	}
	if _, err := m.db.Scalers().Release(context.WithoutCancel(ctx), a.id); err != nil {
		m.log.Warn("scaler: forgetting a spawn failed", "agent_id", a.id, "err", err)
	}
	m.mu.Lock()
	delete(m.agents, a.id)
	delete(m.buffer, a.id)
	st := m.state[a.scaler]
	st.cpus -= a.cpus
	st.mem -= a.mem
	m.mu.Unlock()
	if m.cfg.Hooks.ScaleDown != nil {
		m.cfg.Hooks.ScaleDown(a.scaler, reason)
	}
	m.log.Info("scaler: agent removed", "agent_id", a.id, "scaler", a.scaler, "reason", reason)
	m.Wake()
}

// Registered is told by the fleet that an agent registered. It returns the
// job the agent was started for ("" for none) and whether the agent is a
// scaler's, which takes one job and is then removed.
func (m *Manager) Registered(agentID string) (jobID string, ephemeral bool) {
	m.mu.Lock()
	a := m.agents[agentID]
	_, adopt := m.adopting[agentID]
	delete(m.adopting, agentID)
	m.mu.Unlock()
	sp, err := m.db.Scalers().Registered(context.Background(), agentID)
	if err != nil && a == nil {
		return "", false
	}
	if a == nil && adopt {
		// An agent the previous process started is back in time.
		a = &managed{id: agentID, scaler: sp.Scaler, jobID: sp.JobID, runID: sp.RunID, warm: sp.JobID == "",
			registered: make(chan struct{}), startedAt: sp.StartedAt}
		if c := m.config(sp.Scaler); c != nil {
			a.backend = c.Type
			if r, ok := m.cfg.Backends[c.Type].(Reaper); ok {
				a.inst = reaped{r: r, id: agentID}
			}
		}
		m.mu.Lock()
		m.agents[agentID] = a
		m.mu.Unlock()
	}
	if a == nil { // another server's spawn
		return sp.JobID, true
	}
	m.mu.Lock()
	a.state, a.goneAt = store.SpawnRunning, time.Time{}
	st := m.state[a.scaler]
	if st != nil {
		st.failures, st.deferUntil = 0, time.Time{}
	}
	m.mu.Unlock()
	a.regOnce.Do(func() {
		close(a.registered)
		if h := m.cfg.Hooks.Registered; h != nil {
			h(a.backend, m.now().Sub(a.startedAt))
		}
	})
	return a.jobID, true
}

// Took is told by the fleet that a scaler's agent was sent a job: events
// about the agent are that job's from now on, and those it could not
// attribute so far follow, in order (B175).
func (m *Manager) Took(agentID, runID, jobID string) {
	m.mu.Lock()
	a := m.agents[agentID]
	if a == nil {
		m.mu.Unlock()
		return
	}
	a.took = &jobRef{runID: runID, jobID: jobID}
	buf := m.buffer[agentID]
	delete(m.buffer, agentID)
	m.mu.Unlock()
	for _, ev := range buf {
		m.record(agentID, runID, jobID, ev.typ, ev.detail, ev.at)
	}
}

// Gone is told by the fleet that an agent's connection ended; held is how
// many jobs it still held. A scaler's agent holding none is removed now;
// one holding a job has the recovery window to come back.
func (m *Manager) Gone(agentID, reason string, held int) {
	m.mu.Lock()
	a := m.agents[agentID]
	if a == nil || a.state != store.SpawnRunning {
		m.mu.Unlock()
		return
	}
	if held > 0 {
		a.goneAt = m.now()
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	if reason == "" {
		reason = "job-complete"
	}
	go m.destroy(context.Background(), a, reason)
}

// reaped is the instance of an adopted agent: removed through its
// backend's Reap.
type reaped struct {
	r  Reaper
	id string
}

func (reaped) Exited() <-chan struct{} { return nil }
func (reaped) ExitErr() error          { return nil }
func (reaped) Tail() string            { return "" }
func (x reaped) Destroy(ctx context.Context, _ string) error {
	return x.r.Reap(ctx, x.id)
}

// warm keeps each scaler's warm pool at its size.
func (m *Manager) warm(ctx context.Context) {
	m.mu.Lock()
	var want []Config
	for _, c := range m.scalers {
		if c.WarmPool.Size > 0 && !m.retiring(c.Name) && m.now().After(m.state[c.Name].deferUntil) {
			if n := c.WarmPool.Size - m.warmReadyLocked(c.Name); n > 0 {
				for range n {
					want = append(want, c)
				}
			}
		}
	}
	m.mu.Unlock()
	for _, c := range want {
		room, err := m.room(ctx, c)
		if err != nil || room <= 0 {
			continue
		}
		if err := m.spawn(ctx, c, "", ""); err != nil && err != errNoRoom {
			m.log.Warn("scaler: starting a warm-pool agent failed", "scaler", c.Name, "err", err)
		}
	}
}

// warmReadyLocked counts the scaler's warm agents, ready or starting, that
// have not taken a job.
func (m *Manager) warmReadyLocked(name string) int {
	n := 0
	for _, a := range m.agents {
		if a.scaler == name && a.warm && a.took == nil && !a.destroyed {
			n++
		}
	}
	return n
}

// Serves reports whether a configured scaler would start an agent for a
// job with the requirement (the engine's unroutable probe asks, B169).
func (m *Manager) Serves(r kiln.Requirement) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return match(m.scalers, m.retiring, r) >= 0
}

// Names are the configured scalers, for the unroutable message.
func (m *Manager) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.scalers))
	for _, c := range m.scalers {
		out = append(out, c.Name)
	}
	return out
}

// Reason says why jobs with the requirement wait when a scaler serves it:
// an agent is being started, the scaler is at capacity, or — ""
// with true — it backs off after a failure, and the jobs keep the
// provisioning error as their reason.
func (m *Manager) Reason(r kiln.Requirement) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := match(m.scalers, m.retiring, r)
	if i < 0 {
		return "", false
	}
	c := m.scalers[i]
	st := m.state[c.Name]
	if m.now().Before(st.deferUntil) {
		return "", true
	}
	n := 0
	for _, a := range m.agents {
		if a.scaler == c.Name {
			n++
		}
	}
	if n >= c.MaxAgents {
		return fmt.Sprintf("at capacity (scaler %s: %d of %d agents)", c.Name, n, c.MaxAgents), true
	}
	return fmt.Sprintf("%s (scaler %s)", store.ReasonSpawning, c.Name), true
}
