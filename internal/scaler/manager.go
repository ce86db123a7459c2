// Package scaler starts agents on demand: when a queued job finds no idle
// agent, the scaler whose labels serve it starts one — a process, a
// container, a VM — with a single-use token bound to the agent's id and
// labels, and removes it once its one job has ended. Spawns are claimed in
// the database (store.Scalers), so several servers on one database start
// one agent per job. Backends only start and remove; every decision (which
// scaler, caps, backoff, warm pools, attribution of events) is here.
package scaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
)

// Fleet is what the manager needs of the agents' side.
type Fleet interface {
	// IdleAccepting reports whether a connected agent with a free slot
	// accepts the requirement (then no agent is started for it).
	IdleAccepting(r kiln.Requirement) bool
	// Idle reports whether the agent is connected and holds no job.
	Idle(agentID string) bool
	// Drain asks a connected agent to finish and exit.
	Drain(agentID string) error
	// RefreshReasons has the pending reasons written again.
	RefreshReasons()
}

// ManagerConfig configures a Manager.
type ManagerConfig struct {
	Scalers []Config
	Caps    Caps
	// Instance identifies this server; its spawns carry it, and only it
	// removes them.
	Instance string
	// PublicURL is the default server_url.
	PublicURL string
	// RecoveryWindow is how long an agent that disconnected during its job
	// has to come back before it is removed.
	RecoveryWindow time.Duration
	// Backends by scaler type.
	Backends map[string]Backend
	Tick     time.Duration // default 1s
	Clock    func() time.Time
	Logger   *slog.Logger
	Hooks    Hooks
	// Leading reports whether this server leads the cluster (nil: it
	// does); only the leader reaps provisions that never arrived.
	Leading func() bool
}

// Hooks tell the metrics what the manager does; any may be nil.
type Hooks struct {
	SpawnFailed func(backend string, bound bool)
	Refused     func()
	Registered  func(backend string, took time.Duration)
	ScaleUp     func(scaler string)
	ScaleDown   func(scaler, reason string)
	Redispatch  func(trigger string, n int)
	// Reserved is told what a scaler's agents (scaler "__global__": all
	// scalers') reserve now, after every change.
	Reserved func(scaler, scalerType string, reserved kiln.Resources)
}

// Backoff after consecutive spawn failures of a scaler (B173).
const (
	BackoffBase = 30 * time.Second
	BackoffMax  = 15 * time.Minute
)

// BackoffFor is the wait after n consecutive failures: 30 s doubling to
// 15 min.
func BackoffFor(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := BackoffBase
	for i := 1; i < n && d < BackoffMax; i++ {
		d *= 2
	}
	return min(d, BackoffMax)
}

// Manager runs the scalers.
type Manager struct {
	db  *store.DB
	cfg ManagerConfig
	log *slog.Logger

	mu       sync.Mutex
	fleet    Fleet
	scalers  []Config
	state    map[string]*scalerState
	agents   map[string]*managed
	adopting map[string]time.Time // spawns a previous process of this server started → until when they may come back
	buffer   map[string][]bufferedEvent
	wake     chan struct{}
	ctx      context.Context
	spawns   sync.WaitGroup
	reapAt   time.Time // the event reaper's next look (eventreap.go)
	// serverURL is the server's own address, the server_url of scalers
	// that name none (SetServerURL; reloaded scalers get it too).
	serverURL string
}

type scalerState struct {
	failures    int
	deferUntil  time.Time
	lastError   string
	lastErrorAt time.Time
	retiring    bool
	sem         chan struct{}
	reserved    kiln.Resources // by this server's agents of the scaler
}

// managed is an agent this process started (or adopted).
type managed struct {
	id, scaler, backend string
	jobID, runID        string // the job it was started for ("" warm)
	warm                bool
	inst                Instance
	registered          chan struct{}
	regOnce             sync.Once
	startedAt           time.Time
	state               string
	goneAt              time.Time // disconnected holding a job
	idleSince           time.Time
	took                *jobRef        // the job it took: attribution after registration
	reserved            kiln.Resources // against the budgets, given back when it goes
	given               kiln.Resources // its size: it takes only jobs within it
	destroyed           bool
}

type jobRef struct{ runID, jobID string }

type bufferedEvent struct {
	typ, detail string
	at          time.Time
}

// NewManager validates the scalers and returns a manager; Run starts it.
func NewManager(db *store.DB, cfg ManagerConfig) (*Manager, error) {
	if errs := Validate(cfg.Scalers, cfg.Caps); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.Instance == "" {
		return nil, errors.New("scaler: an instance id is required")
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Caps.MaxAgents == 0 {
		cfg.Caps.MaxAgents = DefaultGlobalMaxAgents
	}
	m := &Manager{db: db, cfg: cfg, log: cfg.Logger, state: map[string]*scalerState{}, agents: map[string]*managed{},
		adopting: map[string]time.Time{}, buffer: map[string][]bufferedEvent{}, wake: make(chan struct{}, 1)}
	for _, c := range cfg.Scalers {
		c, err := m.prepare(c)
		if err != nil {
			return nil, err
		}
		m.scalers = append(m.scalers, c)
		m.state[c.Name] = &scalerState{sem: make(chan struct{}, c.MaxConcurrentSpawns)}
	}
	return m, nil
}

// prepare fills what a scaler leaves out and checks that this build and
// its backend can run it (a docker scaler whose agents cannot reach the
// server is refused here, B186).
func (m *Manager) prepare(c Config) (Config, error) {
	c = c.withDefaults(m.cfg.PublicURL)
	b := m.cfg.Backends[c.Type]
	if b == nil {
		return c, fmt.Errorf("scalers: %s.type: %s scalers are not available in this build (runnable here: %s)",
			c.Name, c.Type, strings.Join(runnable(m.cfg.Backends), ", "))
	}
	if ch, ok := b.(configChecker); ok {
		if err := ch.CheckConfig(c); err != nil {
			return c, err
		}
	}
	if c.ServerURL == "" {
		c.ServerURL = m.serverURL // "" until the server listens (SetServerURL)
	}
	return c, nil
}

func runnable(bs map[string]Backend) []string {
	var out []string
	for _, t := range Types {
		if bs[t] != nil {
			out = append(out, t)
		}
	}
	return out
}

// SetServerURL sets the URL agents of scalers without a server_url dial:
// the server's own address, known once it listens. Call it before Run.
func (m *Manager) SetServerURL(u string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.serverURL = u
	for i := range m.scalers {
		if m.scalers[i].ServerURL == "" {
			m.scalers[i].ServerURL = u
		}
	}
}

// SetHooks sets the metrics' hooks. Call it before Run.
func (m *Manager) SetHooks(h Hooks) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cfg.Hooks = h
}

// SetFleet connects the manager to the agents' side (the fleet is built
// after the manager, which it consults).
func (m *Manager) SetFleet(f Fleet) {
	m.mu.Lock()
	m.fleet = f
	m.mu.Unlock()
}

func (m *Manager) now() time.Time { return m.cfg.Clock() }

// Wake has the manager look at the queue now (the dispatcher calls it when
// jobs are left without an idle agent).
func (m *Manager) Wake() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// Run starts agents for waiting jobs and keeps the warm pools until ctx
// ends; then it removes every agent it started.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	m.ctx = ctx
	m.mu.Unlock()
	m.recover(ctx)
	t := time.NewTicker(m.cfg.Tick)
	defer t.Stop()
	for {
		m.pass(ctx)
		select {
		case <-ctx.Done():
			m.shutdown()
			return nil
		case <-m.wake:
		case <-t.C:
		}
	}
}

// recover takes over the spawns a previous process of this server left:
// their agents have the recovery window to come back.
func (m *Manager) recover(ctx context.Context) {
	spawns, err := m.db.Scalers().List(ctx, m.cfg.Instance)
	if err != nil {
		if ctx.Err() == nil { // not when the server stops during its start
			m.log.Error("scaler: reading the spawns of the previous process failed", "err", err)
		}
		return
	}
	known := map[string]bool{}
	for _, sp := range spawns {
		known[sp.AgentID] = true
	}
	m.mu.Lock()
	used := map[string]bool{}
	for _, c := range m.scalers {
		used[c.Type] = true
	}
	m.mu.Unlock()
	for typ, b := range m.cfg.Backends {
		// Only the backends a scaler uses: a server without docker
		// scalers never touches the Docker Engine.
		if sw, ok := b.(Sweeper); ok && used[typ] {
			if err := sw.Sweep(ctx, func(id string) bool { return known[id] }); err != nil {
				m.log.Warn("scaler: removing left-over agents failed", "err", err)
			}
		}
	}
	until := m.now().Add(m.cfg.RecoveryWindow)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, sp := range spawns {
		m.adopting[sp.AgentID] = until
	}
	if len(spawns) > 0 {
		m.log.Info("scaler: waiting for the agents the previous process started", "agents", len(spawns), "until", until)
	}
}

// shutdown removes every agent this process started; their jobs are
// recovered or requeued by the next server.
func (m *Manager) shutdown() {
	m.mu.Lock()
	var all []*managed
	for _, a := range m.agents {
		all = append(all, a)
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, a := range all {
		wg.Go(func() { m.destroy(ctx, a, "shutdown") })
	}
	wg.Wait()
	m.spawns.Wait()
	// Backends holding connections (the docker client's) close them.
	for _, b := range m.cfg.Backends {
		if c, ok := b.(interface{ Close() error }); ok {
			_ = c.Close()
		}
	}
}

// pass is one look at the queue, the pools and the agents.
func (m *Manager) pass(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	idle := len(m.scalers) == 0 && len(m.agents) == 0 && len(m.adopting) == 0
	m.mu.Unlock()
	if idle {
		return // no scaler configured (yet: a reload may add one)
	}
	m.expire(ctx)
	m.pruneRetired()
	n := m.demand(ctx)
	if n > 0 && m.cfg.Hooks.Redispatch != nil {
		m.cfg.Hooks.Redispatch("sweep", n)
	}
	m.warm(ctx)
	m.reapProvisions(ctx)
}

// expire removes agents gone past the recovery window, adopted spawns that
// never came back, and surplus idle agents.
func (m *Manager) expire(ctx context.Context) {
	now := m.now()
	var gone []*managed
	var drain []string
	var lapsed []string
	m.mu.Lock()
	f := m.fleet
	for _, a := range m.agents {
		if !a.goneAt.IsZero() && now.Sub(a.goneAt) > m.cfg.RecoveryWindow {
			gone = append(gone, a)
		}
	}
	for id, until := range m.adopting {
		if now.After(until) {
			lapsed = append(lapsed, id)
			delete(m.adopting, id)
		}
	}
	m.mu.Unlock()
	for _, a := range gone {
		m.destroy(ctx, a, "heartbeat-timeout")
	}
	for _, id := range lapsed {
		m.log.Info("scaler: an agent the previous process started did not come back; removing it", "agent_id", id)
		m.reap(ctx, id)
	}
	if f == nil {
		return
	}
	m.mu.Lock()
	for _, a := range m.agents {
		if a.state != store.SpawnRunning || !a.goneAt.IsZero() {
			continue
		}
		if !f.Idle(a.id) {
			a.idleSince = time.Time{}
			continue
		}
		if a.idleSince.IsZero() {
			a.idleSince = now
		}
		c := m.config(a.scaler)
		switch {
		case a.took != nil: // its one job ended: it goes
			drain = append(drain, a.id)
		case c == nil || m.retiring(c.Name):
			drain = append(drain, a.id)
		case a.warm && m.warmReadyLocked(c.Name) <= c.WarmPool.Size:
			// part of the pool: kept however long it idles
		case now.Sub(a.idleSince) > c.WarmPool.IdleTimeout:
			drain = append(drain, a.id)
		}
	}
	m.mu.Unlock()
	for _, id := range drain {
		_ = f.Drain(id)
	}
}

// reap removes a spawn by id: the backend's leftovers and the row.
func (m *Manager) reap(ctx context.Context, id string) {
	sp, err := m.db.Scalers().Get(ctx, id)
	if err == nil {
		m.mu.Lock()
		c := m.config(sp.Scaler)
		if c != nil {
			cc := *c
			c = &cc
		}
		m.mu.Unlock()
		if c != nil {
			if r, ok := m.cfg.Backends[c.Type].(Reaper); ok {
				if err := r.Reap(ctx, id); err != nil {
					m.log.Warn("scaler: removing a left-over agent failed", "agent_id", id, "err", err)
				}
			}
			// B151: someone else's machine; only a scale-down removes it.
			if eb, ok := m.cfg.Backends[c.Type].(*EventBackend); ok {
				if err := eb.ScaleDownReason(ctx, *c, id, "heartbeat-timeout"); err != nil {
					m.log.Warn("scaler: scale-down failed", "agent_id", id, "err", err)
				}
			}
		}
	}
	if _, err := m.db.Scalers().Release(ctx, id); err != nil {
		m.log.Warn("scaler: forgetting a spawn failed", "agent_id", id, "err", err)
	}
}

// config returns the scaler named name.
func (m *Manager) config(name string) *Config {
	for i := range m.scalers {
		if m.scalers[i].Name == name {
			return &m.scalers[i]
		}
	}
	return nil
}

func (m *Manager) retiring(name string) bool {
	st := m.state[name]
	return st == nil || st.retiring
}

// newAgentID is scaler-<type>-<8 hex>.
func newAgentID(typ string) string {
	return "scaler-" + typ + "-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
}

var errNoRoom = errors.New("at capacity")
