package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// errIDHeldElsewhere refuses a registration whose id another live
// coordinator holds for another token.
var errIDHeldElsewhere = errors.New("fleet: the agent id is held by another coordinator")

// handshake runs auth and register, each within its deadline.
func (c *conn) handshake() (closeCause, bool) {
	f := c.f
	m, cause, ok := c.first(f.cfg.AuthTimeout, "auth")
	if !ok {
		return cause, false
	}
	auth, isAuth := m.(*proto.Auth)
	if !isAuth {
		c.sendError(proto.ErrUnauthorized, fmt.Sprintf("the first frame must be auth, not %s", m.Type()))
		return closeCause{kind: "unauthorized", code: proto.CloseUnauthorized, reason: "no auth frame"}, false
	}
	if cause, ok := c.authenticate(auth); !ok {
		return cause, false
	}
	m, cause, ok = c.first(f.cfg.RegisterTimeout, "register")
	if !ok {
		return cause, false
	}
	reg, isReg := m.(*proto.Register)
	if !isReg {
		c.sendError(proto.ErrNotRegistered, fmt.Sprintf("register must follow auth.ok, not %s", m.Type()))
		return closeCause{kind: "invalid_message", code: proto.CloseInvalidMessage, reason: "no register frame"}, false
	}
	return c.register(reg)
}

// first reads the frame that must arrive within d: auth after the upgrade,
// register after auth.ok. The deadline is a timer, not the read's context,
// so that it closes the connection with 4002 rather than cutting it.
func (c *conn) first(d time.Duration, what string) (proto.Message, closeCause, bool) {
	fired := make(chan struct{})
	timer := time.AfterFunc(d, func() {
		defer close(fired)
		c.f.disconnect(c, closeCause{kind: what + "_timeout", code: proto.CloseAuthTimeout,
			reason: fmt.Sprintf("no %s frame within %s", what, d)})
	})
	_, m, cause, ok := c.decode()
	stopped := timer.Stop()
	if !stopped {
		<-fired // the timeout's goroutine ends within the connection's
	}
	if !ok {
		return nil, cause, false
	}
	if !stopped {
		return nil, causeClosed(), false
	}
	return m, closeCause{}, true
}

func (c *conn) authenticate(m *proto.Auth) (closeCause, bool) {
	f := c.f
	if m.ProtocolVersion < proto.MinVersion || m.ProtocolVersion > proto.Version {
		c.sendError(proto.ErrProtocol, fmt.Sprintf("protocol version %d is not supported; this orchestrator speaks versions %d to %d",
			m.ProtocolVersion, proto.MinVersion, proto.Version))
		return closeCause{kind: "protocol", code: proto.CloseProtocol, reason: "unsupported protocol version"}, false
	}
	tk, err := f.db.Auth().VerifyAgentToken(context.Background(), m.Token)
	if errors.Is(err, store.ErrUnauthorized) {
		c.sendError(proto.ErrUnauthorized, "the agent token is unknown, revoked or expired")
		return closeCause{kind: "unauthorized", code: proto.CloseAuthFailed, reason: "invalid or expired token"}, false
	}
	if err != nil {
		f.log.Error("fleet: checking an agent token failed", "err", err)
		c.sendError(proto.ErrInternal, "the orchestrator could not check the token; the agent will retry")
		return closeCause{kind: "internal", code: proto.CloseInternal, reason: "internal error"}, false
	}
	f.reg.authenticated(c, tk)
	// Authenticated: it may send frames of the configured size, and no
	// longer counts against the strangers' limits (B102).
	c.ws.SetReadLimit(f.cfg.MaxMessageBytes)
	c.unauth.release()
	if c.closing.Load() {
		return causeClosed(), false
	}
	if err := c.send(&proto.AuthOK{ConnectionID: c.id}); err != nil {
		return causeRead(err), false
	}
	return closeCause{}, true
}

// register applies the registration gates, records the agent, reconciles
// the jobs it says it still holds, and answers register.ack.
func (c *conn) register(m *proto.Register) (closeCause, bool) {
	f := c.f
	tk := c.token
	osLabel, archLabel := c.platform("os", m.OS, kiln.IsOS), c.platform("arch", m.Arch, kiln.IsArch)
	if out := outsideScope(tk.Labels, m.Labels, osLabel, archLabel); len(out) > 0 {
		c.sendError(proto.ErrUnauthorized, fmt.Sprintf("the agent token does not allow the labels %s (it allows %s)",
			strings.Join(out, ", "), strings.Join(tk.Labels, ", ")))
		return closeCause{kind: "unauthorized", code: proto.CloseAuthFailed, reason: "labels outside the token's scope"}, false
	}
	labels := effectiveLabels(m.Labels, osLabel, archLabel, tk.Mandatory)
	if tk.AgentID != "" && tk.AgentID != m.AgentID {
		c.sendError(proto.ErrUnauthorized, fmt.Sprintf("the agent token is bound to agent id %s, not %s", tk.AgentID, m.AgentID))
		return closeCause{kind: "unauthorized", code: proto.CloseAuthFailed, reason: "agent id outside the token's binding"}, false
	}
	secretHash := store.HashToken(m.AgentSecret)

	// B44 and B45: an id held or being registered by a
	// connection with another token is refused and left untouched; the
	// same token replaces its older connection.
	s, ok := f.reg.claimID(m.AgentID, c)
	if !ok {
		c.sendError(proto.ErrAgentIDInUse, fmt.Sprintf("agent id %s is in use by a connection authenticated with another token", m.AgentID))
		return closeCause{kind: "agent_id_in_use", code: proto.CloseInvalidMessage, reason: "agent id in use"}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := f.hooks.registering.Load(); h != nil {
		(*h)(m.AgentID)
	}
	if c.closing.Load() {
		return causeClosed(), false
	}
	// B113: the id's secret is checked before the live registration is
	// touched, so a token holder without it cannot supersede the agent.
	if err := f.db.Auth().CheckAgentSecret(context.Background(), m.AgentID, secretHash); err != nil {
		return c.refuseRegistration(m.AgentID, err)
	}
	if old := f.reg.get(m.AgentID); old != nil && old.c != c {
		f.supersede(old.c)
	}

	a := &agent{id: m.AgentID, c: c, labels: labels, maxJobs: m.MaxJobs, hostname: m.Hostname,
		version: m.Version, draining: m.Draining, jobs: map[string]*heldJob{}}
	leases := make([]store.Lease, len(m.InFlight))
	runs := make(map[string]string, len(m.InFlight))
	for i, j := range m.InFlight {
		leases[i] = store.Lease{JobID: j.JobID, Epoch: j.LeaseEpoch}
		runs[j.JobID] = j.RunID
	}
	var rec store.ReconnectResult
	err := f.cm.do(func(ctx context.Context, tx *store.Tx) (store.Effects, error) {
		rec = store.ReconnectResult{}
		// B144: the id is held across coordinators by the one the
		// database names, while that one is alive; the same token moves
		// the agent here (the other drops its stale connection).
		holder, holderToken, err := tx.Auth().AgentHolder(ctx, m.AgentID, f.liveSince(tx.Now()))
		if err != nil {
			return store.Effects{}, err
		}
		if holder != "" && holder != f.cl.ID() && holderToken != tk.ID {
			return store.Effects{}, errIDHeldElsewhere
		}
		if _, err := tx.Auth().ClaimAgentToken(ctx, tk.ID, m.AgentID); err != nil {
			return store.Effects{}, err
		}
		if err := tx.Auth().BindAgentSecret(ctx, m.AgentID, secretHash); err != nil {
			return store.Effects{}, err
		}
		if err := tx.Auth().UpsertAgent(ctx, store.AgentRecord{ID: m.AgentID, Labels: labels, TokenID: tk.ID,
			Hostname: m.Hostname, Version: m.Version, Coordinator: f.cl.ID(), MaxJobs: m.MaxJobs}); err != nil {
			return store.Effects{}, err
		}
		// Whatever the agent still held under this id enters recovery,
		// and Reconnect gives back what it lists: one rule for a blip, a
		// superseded connection, and an orchestrator restart.
		lost, err := tx.Queue().AgentLost(ctx, m.AgentID)
		if err != nil {
			return store.Effects{}, err
		}
		r, err := tx.Queue().Reconnect(ctx, m.AgentID, leases)
		if err != nil {
			return store.Effects{}, err
		}
		rec = r
		// A kept job's logs go under its run: take the run from the
		// store, not from what the agent said.
		for _, l := range r.Kept {
			j, err := tx.Jobs().Get(ctx, l.JobID)
			if err != nil {
				return store.Effects{}, err
			}
			runs[l.JobID] = j.RunID
		}
		eff := lost.Effects
		mergeEffects(&eff, r.Effects)
		return eff, nil
	})
	if err != nil {
		return c.refuseRegistration(m.AgentID, err)
	}
	a.connectedAt = f.now() // registered: committed, as the API's connected_at says

	ack := &proto.RegisterAck{AgentID: m.AgentID, Labels: labels.Labels, Mandatory: labels.Mandatory, MaxJobs: m.MaxJobs,
		HeartbeatIntervalMS:    f.cfg.HeartbeatInterval.Milliseconds(),
		JobHeartbeatIntervalMS: f.cfg.JobHeartbeatInterval.Milliseconds(),
		DropAfterMS:            f.cfg.DropAfter.Milliseconds(),
		RecoveryWindowMS:       f.cfg.RecoveryWindow.Milliseconds(),
		LeaseMarginMS:          f.cfg.LeaseMargin.Milliseconds(),
		Coordinators:           f.cl.Coordinators()}
	// Set before the agent is registered: the monitor compares it with
	// the live set and sends the agent any change after this list (B139).
	a.coordinators, a.sentCoordinators = ack.Coordinators, ack.Coordinators
	for _, l := range rec.Kept {
		a.jobs[l.JobID] = &heldJob{runID: runs[l.JobID], epoch: l.Epoch, sent: true, acked: true}
		ack.Recovered = append(ack.Recovered, l.JobID)
	}
	for _, l := range rec.Refused {
		ack.Dropped = append(ack.Dropped, l.JobID)
	}
	bound := ""
	if s := f.cfg.Scaler; s != nil {
		var limit kiln.Resources
		bound, a.oneJob, limit = s.Registered(m.AgentID)
		if a.oneJob {
			// B198: it claims only the jobs its container or VM fits.
			a.labels.Limit = limit
		}
		a.took = a.oneJob && len(rec.Kept) > 0
	}
	c.agent.Store(a)
	f.reg.register(a)
	if err := c.send(ack); err != nil {
		return causeRead(err), false
	}
	// Only now may frames follow: the agent reads register.ack first.
	a.live.Store(true)
	f.reg.changed()
	if bound != "" && !a.took {
		f.disp.bind(a, bound)
	} else {
		f.disp.agentFree(a)
	}
	f.disp.refreshReasons()
	f.log.Info("agent registered", "agent_id", a.id, "labels", labels.Labels.Key(), "mandatory", labels.Mandatory.Key(),
		"max_jobs", a.maxJobs, "recovered", len(rec.Kept), "dropped", len(rec.Refused), "resolved", len(rec.Resolved))
	if f.cfg.OnRegister != nil {
		f.cfg.OnRegister(a.id)
	}
	return closeCause{}, true
}

// refuseRegistration answers a registration the store refused.
func (c *conn) refuseRegistration(agentID string, err error) (closeCause, bool) {
	switch {
	case errors.Is(err, errIDHeldElsewhere):
		c.sendError(proto.ErrAgentIDInUse, fmt.Sprintf("agent id %s is in use by a connection to another coordinator authenticated with another token", agentID))
		return closeCause{kind: "agent_id_in_use", code: proto.CloseInvalidMessage, reason: "agent id in use"}, false
	case errors.Is(err, store.ErrAgentIDBound):
		c.f.log.Warn("fleet: refused a registration without the agent id's secret", "agent_id", agentID, "token_id", c.token.ID)
		c.sendError(proto.ErrAgentIDBound, fmt.Sprintf("agent id %s belongs to another agent: its secret does not match the one kept "+
			"in that agent's state directory; start this agent with a state directory of its own (a new id)", agentID))
		return closeCause{kind: "agent_id_bound", code: proto.CloseAuthFailed, reason: "agent id bound to another agent"}, false
	case errors.Is(err, store.ErrUnauthorized):
		c.sendError(proto.ErrUnauthorized, "the agent token is revoked, expired, or a single-use token another agent already used")
		return closeCause{kind: "unauthorized", code: proto.CloseAuthFailed, reason: "invalid or expired token"}, false
	default:
		c.f.log.Error("fleet: recording a registration failed", "agent_id", agentID, "err", err)
		c.sendError(proto.ErrInternal, "the orchestrator could not record the registration; the agent will retry")
		return closeCause{kind: "internal", code: proto.CloseInternal, reason: "internal error"}, false
	}
}

// platform is the label a reported OS or architecture becomes: itself when
// known is true of it (Go's GOOS and GOARCH values), else none (B114).
func (c *conn) platform(field, v string, known func(string) bool) string {
	l := strings.ToLower(strings.TrimSpace(v))
	if l == "" || known(l) {
		return l
	}
	c.f.log.Warn("fleet: an agent reported an "+field+" kiln does not know; it is not made a label", field, v)
	return ""
}

// outsideScope returns the labels a registration would carry outside its
// token's scope (nil scope: any). Declared labels must be in the scope;
// the reported OS and architecture are kiln's own and within a scope that
// names none of their kind, but a scope that names an OS (an
// architecture) pins it (B114).
func outsideScope(scope kiln.Labels, declared []string, os, arch string) []string {
	if scope == nil {
		return nil
	}
	var out []string
	for _, l := range kiln.NewLabels(declared...) {
		if !scope.Has(l) && l != os && l != arch {
			out = append(out, l)
		}
	}
	for _, p := range []struct {
		label string
		kind  func(string) bool
	}{{os, kiln.IsOS}, {arch, kiln.IsArch}} {
		if p.label != "" && !scope.Has(p.label) && slices.ContainsFunc(scope, p.kind) {
			out = append(out, p.label)
		}
	}
	return out
}
