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
		i := m.pickLocked(req)
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
			if err := m.spawn(ctx, c, j.ID, j.RunID, req.Resources); err != nil {
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
	st := m.state[name]
	return st == nil || m.now().Before(st.deferUntil)
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
	m.mu.Lock()
	global := m.cfg.Caps.MaxAgents
	m.mu.Unlock()
	room := min(c.MaxAgents-counts[c.Name], global-total)
	if room <= 0 && m.cfg.Hooks.Refused != nil {
		m.cfg.Hooks.Refused()
	}
	return room, nil
}

// reserve books what one agent is given against the scaler's and the
// global budgets; false when either would be exceeded (B198) or the
// scaler is backing off after failures.
func (m *Manager) reserve(c Config, amount kiln.Resources) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	st := m.state[c.Name]
	if st == nil {
		return false // retired meanwhile
	}
	// The caller checked the backoff before reading the queue, but a
	// spawn failing meanwhile frees its job for that read: checked again
	// here, under the lock its failure takes, the job waits out the
	// backoff instead of getting a second spawn at once.
	if m.now().Before(st.deferUntil) {
		return false
	}
	if ok, _ := fits(c, m.cfg.Caps, st.reserved, m.reservedLocked(), amount); !ok {
		if m.cfg.Hooks.Refused != nil {
			m.cfg.Hooks.Refused()
		}
		return false
	}
	st.reserved.MilliCPUs += amount.MilliCPUs
	st.reserved.Memory += amount.Memory
	m.reportReservedLocked(c.Name)
	return true
}

// reportReservedLocked tells the metrics what the scaler and all scalers
// reserve now.
func (m *Manager) reportReservedLocked(name string) {
	h := m.cfg.Hooks.Reserved
	if h == nil {
		return
	}
	typ := ""
	if c := m.config(name); c != nil {
		typ = c.Type
	}
	if st := m.state[name]; st != nil {
		h(name, typ, st.reserved)
	}
	h(GlobalScaler, "", m.reservedLocked())
}

// GlobalScaler is the scaler label of the series over all scalers.
const GlobalScaler = "__global__"

// reservedLocked is what every scaler's agents of this server reserve.
func (m *Manager) reservedLocked() kiln.Resources {
	var all kiln.Resources
	for _, s := range m.state {
		all.MilliCPUs += s.reserved.MilliCPUs
		all.Memory += s.reserved.Memory
	}
	return all
}

// unreserveLocked gives an agent's reservation back.
func (m *Manager) unreserveLocked(a *managed) {
	if st := m.state[a.scaler]; st != nil {
		st.reserved.MilliCPUs -= a.reserved.MilliCPUs
		st.reserved.Memory -= a.reserved.Memory
		m.reportReservedLocked(a.scaler)
	}
	a.reserved = kiln.Resources{}
}

// spawn claims a spawn for the job ("" for a warm-pool agent) in the
// database and starts it in the background (B170).
func (m *Manager) spawn(ctx context.Context, c Config, jobID, runID string, asked kiln.Resources) error {
	amount := given(c, asked)
	if !m.reserve(c, amount) {
		return errNoRoom
	}
	unreserve := func() {
		m.mu.Lock()
		m.unreserveLocked(&managed{scaler: c.Name, reserved: amount})
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
		registered: make(chan struct{}), startedAt: m.now(), state: store.SpawnSpawning, reserved: amount, given: amount}
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
		CPUs: float64(amount.MilliCPUs) / 1000, MemoryBytes: amount.Memory, Env: c.Env, Binary: c.Binary,
		Event: func(typ, detail string) { m.Event(id, typ, detail) }, Scaler: c, JobID: jobID, RunID: runID}
	m.spawns.Go(func() { m.run(runCtx, c, a, req) })
	return nil
}

// run is one spawn: wait for a slot, start the agent, wait for it to
// register within the spawn timeout (B172).
func (m *Manager) run(ctx context.Context, c Config, a *managed, req SpawnRequest) {
	// The semaphore of the scaler as it was when the spawn started: a
	// reload may give the scaler a new one for later spawns.
	m.mu.Lock()
	sem := m.state[c.Name].sem
	m.mu.Unlock()
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		m.destroy(context.WithoutCancel(ctx), a, "shutdown")
		return
	}
	released := false
	release := func() {
		if !released {
			released = true
			<-sem
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
	if external(inst) {
		return // the leader's reaper ends it if it never comes (B150)
	}
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
	if st == nil { // its scaler was removed meanwhile
		m.mu.Unlock()
		m.destroy(context.Background(), a, "spawn-failed")
		return
	}
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
	m.unreserveLocked(a)
	m.mu.Unlock()
	if m.cfg.Hooks.ScaleDown != nil {
		m.cfg.Hooks.ScaleDown(a.scaler, reason)
	}
	m.log.Info("scaler: agent removed", "agent_id", a.id, "scaler", a.scaler, "reason", reason)
	m.Wake()
}

// Registered is told by the fleet that an agent registered. It returns the
// job the agent was started for ("" for none), whether the agent is a
// scaler's, which takes one job and is then removed, and what it was given
// (B198): it takes only jobs within that.
func (m *Manager) Registered(agentID string) (jobID string, ephemeral bool, limit kiln.Resources) {
	m.mu.Lock()
	a := m.agents[agentID]
	_, adopt := m.adopting[agentID]
	delete(m.adopting, agentID)
	none := len(m.scalers) == 0 && a == nil && !adopt
	m.mu.Unlock()
	if none {
		return "", false, kiln.Resources{} // no scaler here: as without a manager
	}
	sp, err := m.db.Scalers().Registered(context.Background(), agentID)
	if err != nil && a == nil {
		return "", false, kiln.Resources{}
	}
	if a == nil {
		// Started by another server, or by this one's previous process:
		// its size is the one its job asked for.
		limit = m.sizeOf(sp)
	}
	if a == nil && adopt {
		// An agent the previous process started is back in time; it
		// reserves what it was given again.
		a = &managed{id: agentID, scaler: sp.Scaler, jobID: sp.JobID, runID: sp.RunID, warm: sp.JobID == "",
			registered: make(chan struct{}), startedAt: sp.StartedAt, given: limit}
		m.mu.Lock()
		if c := m.config(sp.Scaler); c != nil {
			a.backend = c.Type
			if r, ok := m.cfg.Backends[c.Type].(Reaper); ok {
				a.inst = reaped{r: r, id: agentID}
			}
			if st := m.state[c.Name]; st != nil {
				a.reserved = limit
				st.reserved.MilliCPUs += limit.MilliCPUs
				st.reserved.Memory += limit.Memory
				m.reportReservedLocked(c.Name)
			}
		}
		m.agents[agentID] = a
		m.mu.Unlock()
	}
	if a == nil { // another server's spawn
		return sp.JobID, true, limit
	}
	m.mu.Lock()
	a.state, a.goneAt = store.SpawnRunning, time.Time{}
	st := m.state[a.scaler]
	if st != nil {
		st.failures, st.deferUntil = 0, time.Time{}
	}
	limit = a.given
	m.mu.Unlock()
	a.regOnce.Do(func() {
		close(a.registered)
		if h := m.cfg.Hooks.Registered; h != nil {
			h(a.backend, m.now().Sub(a.startedAt))
		}
	})
	return a.jobID, true, limit
}

// sizeOf is what a spawn this process did not start was given: the size
// for the resources of the job it was started for (its key), by its
// scaler's configuration here.
func (m *Manager) sizeOf(sp store.Spawn) kiln.Resources {
	var asked kiln.Resources
	if sp.JobID != "" {
		if j, err := m.db.Jobs().Get(context.Background(), sp.JobID); err == nil {
			asked = j.Requirement.Resources
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.config(sp.Scaler)
	if c == nil {
		return asked
	}
	return given(*c, asked)
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
		if err := m.spawn(ctx, c, "", "", kiln.Resources{}); err != nil && err != errNoRoom {
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

// pickLocked is the scaler that starts agents for jobs requiring r: of
// those whose agents accept its labels and that can ever give what it
// asks for, the smallest label set (B168, B199); -1 for none.
func (m *Manager) pickLocked(r kiln.Requirement) int {
	return match(m.scalers, func(name string) bool {
		c := m.config(name)
		return c == nil || m.retiring(name) || tooBig(*c, m.cfg.Caps, r.Resources) != ""
	}, r)
}

// tooBigLocked says, when scalers serve r's labels but none can ever give
// what it asks for, why not, naming each and the key that bounds it; ""
// otherwise (B199).
func (m *Manager) tooBigLocked(r kiln.Requirement) string {
	var why []string
	for _, c := range m.scalers {
		if m.retiring(c.Name) || !serves(c, r) {
			continue
		}
		w := tooBig(c, m.cfg.Caps, r.Resources)
		if w == "" {
			return ""
		}
		why = append(why, w)
	}
	if len(why) == 0 {
		return ""
	}
	return tooBigReason(r.Resources, why)
}

// Serves reports whether a configured scaler would start an agent for a
// job with the requirement (the engine's unroutable probe asks, B169): one
// serves its labels and can give its resources.
func (m *Manager) Serves(r kiln.Requirement) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pickLocked(r) >= 0
}

// Names are the configured scalers, for the unroutable message.
func (m *Manager) Names() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.scalers))
	for _, c := range m.scalers {
		if !m.retiring(c.Name) {
			out = append(out, c.Name)
		}
	}
	return out
}

// TooBig says why no scaler can start an agent for a job with the
// requirement when some serve its labels but none can give the resources
// it asks for ("" otherwise): the unroutable message ends with it (B199).
func (m *Manager) TooBig(r kiln.Requirement) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tooBigLocked(r)
}

// Reason says why jobs with the requirement wait when a scaler serves it:
// an agent is being started, the scaler is at capacity (its agents, or a
// CPU or memory budget, B198), no scaler can ever give what they ask for
// (B199), or — "" with true — it backs off after a failure, and the jobs
// keep the provisioning error as their reason.
func (m *Manager) Reason(r kiln.Requirement) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := m.pickLocked(r)
	if i < 0 {
		if why := m.tooBigLocked(r); why != "" {
			return why, true
		}
		return "", false
	}
	c := m.scalers[i]
	st := m.state[c.Name]
	if m.now().Before(st.deferUntil) {
		return "", true
	}
	// A scaler full of agents still starting is busy for the waiting
	// jobs' own sake: they read "spawning", not "at capacity".
	n, starting := 0, 0
	for _, a := range m.agents {
		if a.scaler == c.Name {
			n++
			if a.state == store.SpawnSpawning {
				starting++
			}
		}
	}
	if n >= c.MaxAgents && starting == 0 {
		return fmt.Sprintf("at capacity (scaler %s: %d of %d agents)", c.Name, n, c.MaxAgents), true
	}
	// The same for a CPU or memory budget (B198).
	if ok, why := fits(c, m.cfg.Caps, st.reserved, m.reservedLocked(), given(c, r.Resources)); !ok && starting == 0 {
		return "at capacity (" + why + ")", true
	}
	return fmt.Sprintf("%s (scaler %s)", store.ReasonSpawning, c.Name), true
}
