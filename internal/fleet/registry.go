package fleet

import (
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// agent is a registered agent: what dispatch needs to know about it. Its
// fields after mu change while it lives; the rest are fixed at
// registration.
type agent struct {
	id          string
	c           *conn
	labels      kiln.AgentLabels
	maxJobs     int
	hostname    string
	version     string
	connectedAt time.Time // when its registration committed

	// live: register.ack was sent, so frames may follow it.
	live atomic.Bool
	// lost: the disconnect function began; no claim may pick the agent.
	lost atomic.Bool

	mu sync.Mutex
	// jobs are the leases the agent holds (job id →), from the commit of
	// the claim to the job's end.
	jobs map[string]*heldJob
	// cancels are job.cancel frames for jobs not yet in jobs (a cancel that
	// overtook the dispatch it is about); they follow the dispatch.
	cancels  map[string]*proto.Cancel
	draining bool
	// drainAsked: Drain was called; the agent's own reports cannot undo it.
	drainAsked bool
	unhealthy  bool
	// full: the agent refused a job as busy; it gets no claim until it
	// reports free capacity or one of its jobs ends.
	full bool
	// oneJob: a scaler's agent, which takes one job (took) and is then
	// drained and removed.
	oneJob, took bool
	// coordinators is the list of live coordinators the agent is to have:
	// register.ack's, then each change the monitor saw (B139).
	coordinators []string

	// pushMu orders the coordinators frames written to the agent, so the
	// last one it reads is the newest list; sentCoordinators (guarded by
	// pushMu) is the list it was last sent.
	pushMu           sync.Mutex
	sentCoordinators []string
}

// heldJob is one lease an agent holds.
type heldJob struct {
	runID   string
	epoch   int64
	attempt int
	// ackDeadline is when the store's ack sweep requeues the job unless
	// its acknowledgement is written.
	ackDeadline time.Time
	sent        bool // the job.dispatch frame was written
	acked       bool // job.ack or job.status running arrived
	sentAt      time.Time
	// steps are the step logs written during this connection: their
	// files to close and chunks to index when the step ends.
	steps map[int]*stepLog
}

type stepLog struct{ first, last uint64 }

// freeSlots is how many more jobs the dispatcher may claim for the agent.
func (a *agent) freeSlots() int {
	if !a.live.Load() || a.lost.Load() {
		return 0
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining || a.unhealthy || a.full || (a.oneJob && a.took) {
		return 0
	}
	return max(a.maxJobs-len(a.jobs), 0)
}

// holds reports whether the agent holds the job under epoch.
func (a *agent) holds(jobID string, epoch int64) (*heldJob, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	j := a.jobs[jobID]
	return j, j != nil && j.epoch == epoch
}

// registry is the in-memory view of connected agents. The store's agents
// table is what survives a restart; this is what dispatch reads.
type registry struct {
	mu     sync.RWMutex
	agents map[string]*agent
	// slots are the agent ids named by registered or registering
	// connections.
	slots map[string]*idSlot
	// conns are every open connection, and byToken the authenticated ones
	// by token id, for revocation.
	conns   map[*conn]struct{}
	byToken map[string]map[*conn]struct{}

	// version changes with the set of live agents; byKey caches, per
	// queue key, the agents accepting it (sorted by id) for that version.
	version uint64
	byKey   map[string][]*agent
	keyVer  uint64
	sorted  []*agent
}

// idSlot serializes the registrations and disconnects of one agent id.
type idSlot struct {
	id string
	mu sync.Mutex
	// holders are the connections that hold (registered) or are
	// registering the id; guarded by registry.mu.
	holders map[*conn]struct{}
}

func newRegistry() *registry {
	return &registry{
		agents: map[string]*agent{}, slots: map[string]*idSlot{},
		conns: map[*conn]struct{}{}, byToken: map[string]map[*conn]struct{}{},
	}
}

func (r *registry) addConn(c *conn) {
	r.mu.Lock()
	r.conns[c] = struct{}{}
	r.mu.Unlock()
}

// authenticated records a connection's token and indexes the connection by
// it, for DisconnectToken and token expiry.
func (r *registry) authenticated(c *conn, tk store.AgentToken) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.token = tk
	if _, open := r.conns[c]; !open {
		return
	}
	set := r.byToken[tk.ID]
	if set == nil {
		set = map[*conn]struct{}{}
		r.byToken[tk.ID] = set
	}
	set[c] = struct{}{}
}

// expired returns the connections whose token expired by now.
func (r *registry) expired(now time.Time) []*conn {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*conn
	for _, set := range r.byToken {
		for c := range set {
			if exp := c.token.ExpiresAt; !exp.IsZero() && !now.Before(exp) {
				out = append(out, c)
			}
		}
	}
	return out
}

// claimID makes c a holder of the agent id, unless a connection
// authenticated with another token holds it or is registering it
// (AGENT_ID_IN_USE): then it returns the holder's nil slot and false.
func (r *registry) claimID(id string, c *conn) (*idSlot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.slots[id]
	if s == nil {
		s = &idSlot{id: id, holders: map[*conn]struct{}{}}
		r.slots[id] = s
	}
	for h := range s.holders {
		if h.tokenID() != c.tokenID() {
			return nil, false
		}
	}
	s.holders[c] = struct{}{}
	c.slot = s
	return s, true
}

// slotOf returns the id slot c holds, if any.
func (r *registry) slotOf(c *conn) *idSlot {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return c.slot
}

// forget drops every trace of a closed connection.
func (r *registry) forget(c *conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.conns, c)
	if tk := c.tokenID(); tk != "" {
		if set := r.byToken[tk]; set != nil {
			delete(set, c)
			if len(set) == 0 {
				delete(r.byToken, tk)
			}
		}
	}
	if s := c.slot; s != nil {
		delete(s.holders, c)
		if len(s.holders) == 0 && r.slots[s.id] == s {
			delete(r.slots, s.id)
		}
	}
}

// register records a (not yet live) agent.
func (r *registry) register(a *agent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.agents[a.id] = a
	r.version++
}

// unregister removes a, if it is still the agent registered under its id.
func (r *registry) unregister(a *agent) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.agents[a.id] != a {
		return false
	}
	delete(r.agents, a.id)
	r.version++
	return true
}

// changed invalidates the caches after an agent went live.
func (r *registry) changed() {
	r.mu.Lock()
	r.version++
	r.mu.Unlock()
}

func (r *registry) get(id string) *agent {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.agents[id]
}

// list returns the agents sorted by id.
func (r *registry) list() []*agent {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked()
	return r.sorted
}

func (r *registry) refreshLocked() {
	if r.keyVer == r.version && r.byKey != nil {
		return
	}
	r.keyVer = r.version
	r.byKey = map[string][]*agent{}
	r.sorted = make([]*agent, 0, len(r.agents))
	for _, a := range r.agents {
		r.sorted = append(r.sorted, a)
	}
	sort.Slice(r.sorted, func(i, j int) bool { return r.sorted[i].id < r.sorted[j].id })
}

// matching returns the registered agents whose labels accept the key,
// busy or not, sorted by id. The slice is shared: do not modify it.
func (r *registry) matching(key string) []*agent {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refreshLocked()
	if as, ok := r.byKey[key]; ok {
		return as
	}
	req := store.KeyRequirement(key)
	var as []*agent
	for _, a := range r.sorted {
		if a.labels.Accepts(req) {
			as = append(as, a)
		}
	}
	r.byKey[key] = as
	return as
}

// connsOfToken returns the connections authenticated with the token.
func (r *registry) connsOfToken(tokenID string) []*conn {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*conn
	for c := range r.byToken[tokenID] {
		out = append(out, c)
	}
	return out
}

func (r *registry) allConns() []*conn {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*conn, 0, len(r.conns))
	for c := range r.conns {
		out = append(out, c)
	}
	return out
}

func (r *registry) counts() (conns, agents int) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.conns), len(r.agents)
}

// effectiveLabels are what an agent offers: its declared labels, its OS and
// architecture, and its token's mandatory labels (an agent must carry a
// label to be asked for it).
func effectiveLabels(declared []string, os, arch string, mandatory kiln.Labels) kiln.AgentLabels {
	extra := slices.Clone(mandatory)
	for _, l := range []string{os, arch} {
		if l != "" {
			extra = append(extra, l)
		}
	}
	return kiln.AgentLabels{Labels: kiln.NewLabels(declared...).Union(extra...), Mandatory: kiln.NewLabels(mandatory...)}
}

// nextAsk is the claim complete-and-claim makes for an agent whose job
// (jobID under epoch) is ending: one job, for the slot this one frees — a
// slot no other claim can take meanwhile, since the job holds it until
// swap. nil when the agent must get nothing next: a scaler's single-use
// agent, one draining, unhealthy, refusing work as full, being lost, or
// not holding the job.
func (a *agent) nextAsk(jobID string, epoch int64) *store.ClaimAsk {
	if !a.live.Load() || a.lost.Load() || a.oneJob {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if j := a.jobs[jobID]; j == nil || j.epoch != epoch || a.draining || a.drainAsked || a.unhealthy || a.full {
		return nil
	}
	return &store.ClaimAsk{AgentID: a.id, Labels: a.labels, Slots: 1}
}

// swap ends the agent's job and records the leases of the jobs claimed
// in the transaction that ended it, at once: the slot passes from one job
// to the next without a moment free for another claim. It reports whether
// the agent held the ending job, and the claimed jobs it recorded (none
// for an agent being lost, whose loss, committed after the claim, covers
// them).
func (a *agent) swap(jobID string, epoch int64, next []store.Claimed) (finished bool, held []store.Claimed) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if j := a.jobs[jobID]; j != nil && j.epoch == epoch {
		delete(a.jobs, jobID)
		a.full = false
		finished = true
	}
	if a.lost.Load() {
		return finished, nil
	}
	for _, c := range next {
		a.jobs[c.JobID] = &heldJob{runID: c.RunID, epoch: c.Epoch, attempt: c.Attempt, ackDeadline: c.AckDeadline}
	}
	return finished, next
}
