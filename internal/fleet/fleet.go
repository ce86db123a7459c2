package fleet

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/proto"
	"github.com/kilnci/kiln/internal/store"
)

// Fleet serves agents. It is the engine's Dispatcher: the engine wakes it
// for queued jobs and has it cancel jobs, and applies the Effects its store
// operations commit (Effects).
type Fleet struct {
	db    *store.DB
	logs  *logstore.Store
	creds CloneCredentials
	cfg   Config
	cl    Cluster
	log   *slog.Logger
	// effects carries what the fleet's store operations committed to the
	// engine, in commit order; closed when Run returns.
	effects chan store.Effects

	reg  *registry
	cm   *committer
	disp *dispatcher
	// reasons writes the dispatcher's pending reasons in short chunks.
	reasons *reasonWriter
	hb      leases // buffered job heartbeats
	acks    leases // deferred job acknowledgements
	stats   counters
	// unauth counts the connections that have not authenticated (B102).
	unauth unauthLimiter

	state     atomic.Int32 // 0 new, 1 running, 2 stopped
	acceptMu  sync.Mutex
	accepting atomic.Bool
	// started is closed once Run accepts agents (server.Run waits for it
	// before it says it is ready).
	started  chan struct{}
	handlers sync.WaitGroup // connection goroutines
	closers  sync.WaitGroup // close handshakes in flight

	// sends are writes to agents on goroutines of their own (dispatches,
	// cancels), so that a slow agent holds up no caller; Run waits for
	// them. sendsClosed, under sendsMu, refuses new ones once it waits.
	sendsMu     sync.Mutex
	sendsClosed bool
	sends       sync.WaitGroup

	lossMu sync.Mutex
	losses map[string]closeCause

	// hooks let tests observe internal steps; nil in production.
	hooks struct {
		released atomic.Pointer[func(agentID string, cause closeCause, rel released)]
		swept    atomic.Pointer[func()]
		// registering runs while a registration holds its id, before it
		// is recorded.
		registering atomic.Pointer[func(agentID string)]
	}
}

// New returns a fleet serving agents from db, storing their logs in logs,
// and asking creds for the checkout of each job it sends. Run starts it;
// the engine applies what it commits (Effects).
func New(db *store.DB, logs *logstore.Store, creds CloneCredentials, cfg Config) (*Fleet, error) {
	if db == nil || logs == nil || creds == nil {
		return nil, errors.New("fleet: a store, a log store and clone credentials are required")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var cl Cluster = newSolo()
	if cfg.Cluster != nil {
		cl = cfg.Cluster
	}
	f := &Fleet{db: db, logs: logs, creds: creds, cfg: cfg, cl: cl, log: cfg.Logger, reg: newRegistry(),
		effects: make(chan store.Effects, effectsBuffer), started: make(chan struct{})}
	f.cm = newCommitter(db, f.emit, cfg.MaxBatch, f.log.Error, &f.stats)
	f.reasons = newReasonWriter(f.cm, f.log.Error)
	f.disp = newDispatcher(f)
	return f, nil
}

func (f *Fleet) now() time.Time { return f.cfg.Clock() }

// effectsBuffer is how many commits' Effects may wait for the engine before
// the committer waits for it, as it did when it called the engine itself.
const effectsBuffer = 1024

// Effects delivers what the fleet's store operations committed (jobs
// queued, finished or to cancel, run changes), in commit order, to the
// engine, which applies them — waking this fleet for queued jobs among
// other things. It is closed when Run returns. Someone must read it while
// the fleet runs: a fleet whose Effects nobody reads stops committing.
func (f *Fleet) Effects() <-chan store.Effects { return f.effects }

// emit hands the engine what a batch of store operations committed; a
// batch that changed nothing is not reported. Only the committer emits, and
// it has stopped before Run closes f.effects.
func (f *Fleet) emit(eff store.Effects) {
	if len(eff.Queued)+len(eff.Finished)+len(eff.Cancel)+len(eff.Runs) > 0 {
		f.effects <- eff
	}
}

// Handler is the /ws endpoint (proto.Path). It answers 503 until Run has
// started and after it ended.
func (f *Fleet) Handler() http.Handler { return http.HandlerFunc(f.serveHTTP) }

// Accepting reports whether Run has started taking agent connections
// (before it, and after it ended, /ws answers 503).
func (f *Fleet) Accepting() bool { return f.accepting.Load() }

// Started is closed once Run accepts agent connections: its start-up
// recovery of the previous process's agents is over.
func (f *Fleet) Started() <-chan struct{} { return f.started }

// Run serves until ctx ends: it starts the committer, the dispatcher and the
// monitor, then accepts agents. When ctx ends it closes every connection
// with 1001 (going away), leaving the agents' jobs for the next process to
// recover, and returns once every goroutine it started has ended (each
// waits for at most the websocket library's close handshake timeouts).
func (f *Fleet) Run(ctx context.Context) error {
	if !f.state.CompareAndSwap(0, 1) {
		return errors.New("fleet: Run was called twice")
	}
	// Store work that is under way finishes even as ctx ends.
	bg := context.WithoutCancel(ctx)
	cmDone := make(chan struct{})
	go func() {
		defer close(cmDone)
		f.cm.run(bg)
	}()
	// The agents the database still lists as connected to a dead (or the
	// previous) process enter recovery before anything else runs.
	if l, ok := f.cl.Leading(); ok {
		if err := f.recoverOrphans(bg, l); err != nil {
			f.log.Error("fleet: recovering the jobs of dead coordinators' agents failed", "err", err)
		}
	}
	loopCtx, stopLoops := context.WithCancel(bg)
	var loops sync.WaitGroup
	loops.Go(func() { f.disp.run(loopCtx) })
	loops.Go(func() { f.monitor(loopCtx) })
	loops.Go(func() { f.reasons.run(loopCtx) })
	loops.Go(func() { f.wakesFromOthers(loopCtx) })
	f.accepting.Store(true)
	close(f.started)
	f.disp.redrive() // the queue may hold jobs from before the start

	<-ctx.Done()
	f.acceptMu.Lock()
	f.accepting.Store(false)
	f.acceptMu.Unlock()
	f.state.Store(2)
	stopLoops()
	loops.Wait()
	for _, c := range f.reg.allConns() {
		f.disconnect(c, causeShutdown())
	}
	f.sendsMu.Lock()
	f.sendsClosed = true
	f.sendsMu.Unlock()
	f.sends.Wait()
	f.handlers.Wait()
	f.cm.shutdown()
	<-cmDone
	close(f.effects)
	f.closers.Wait() // no connection is left to start another
	return nil
}

// goSend runs send on a goroutine that Run waits for, and reports false,
// without running it, once Run has begun waiting: every connection is
// closed by then, so there is nobody to write to.
func (f *Fleet) goSend(send func()) bool {
	f.sendsMu.Lock()
	defer f.sendsMu.Unlock()
	if f.sendsClosed {
		return false
	}
	f.sends.Go(send)
	return true
}

// Wake offers jobs that entered the queue to idle agents now, here and,
// through the cluster's wake-up, on the other coordinators (B146).
func (f *Fleet) Wake(jobs []store.JobRef) {
	if len(jobs) == 0 {
		return
	}
	f.disp.jobsQueued(jobs)
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	f.cl.Publish(ids)
}

// wakesFromOthers offers the jobs other coordinators queued to this one's
// idle agents.
func (f *Fleet) wakesFromOthers(ctx context.Context) {
	ch := f.cl.Wakes()
	if ch == nil {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ids := <-ch:
			f.log.Debug("fleet: woken by another coordinator", "jobs", len(ids))
			if len(ids) == 0 {
				f.disp.redrive()
				continue
			}
			refs := make([]store.JobRef, len(ids))
			for i, id := range ids {
				refs[i] = store.JobRef{ID: id}
			}
			f.disp.jobsQueued(refs)
		}
	}
}

// Cancel sends job.cancel to the agent holding t.JobID under t.Epoch. An
// agent that is not connected is not told: the recovery and stale sweeps
// end the job.
func (f *Fleet) Cancel(t store.CancelTarget, force bool, reason string) {
	a := f.reg.get(t.AgentID)
	if a == nil {
		return
	}
	m := &proto.Cancel{JobID: t.JobID, LeaseEpoch: t.Epoch, Force: force, Reason: reason}
	a.mu.Lock()
	j := a.jobs[t.JobID]
	switch {
	case j != nil && j.epoch != t.Epoch:
		a.mu.Unlock()
		return
	case j == nil || !j.sent:
		// The dispatch has not been written yet: the cancel follows it.
		if a.cancels == nil {
			a.cancels = map[string]*proto.Cancel{}
		}
		a.cancels[t.JobID] = m
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	// Not on the caller's goroutine: the engine calls Cancel while it
	// applies effects, and a stuck agent must not hold that up.
	f.goSend(func() { _ = a.c.send(m) })
}

// Drain asks an agent to finish its jobs and take no new ones.
func (f *Fleet) Drain(agentID string) error {
	a := f.reg.get(agentID)
	if a == nil {
		return kiln.Errorf(kiln.CodeNotFound, "agent %s is not connected", agentID)
	}
	a.mu.Lock()
	a.drainAsked, a.draining = true, true
	a.mu.Unlock()
	f.disp.refreshReasons()
	if err := a.c.send(&proto.Drain{}); err != nil {
		return kiln.Errorf(kiln.CodeUnavailable, "agent %s could not be told to drain: %v", agentID, err)
	}
	return nil
}

// DisconnectToken closes at once (4011) every connection authenticated with
// a token that was revoked.
func (f *Fleet) DisconnectToken(tokenID string) {
	for _, c := range f.reg.connsOfToken(tokenID) {
		f.disconnect(c, closeCause{kind: "token_revoked", code: proto.CloseTokenRevoked, reason: "the agent token was revoked"})
	}
}

// AgentInfo describes a connected agent.
type AgentInfo struct {
	ID            string
	Labels        kiln.Labels
	Mandatory     kiln.Labels
	MaxJobs       int
	ActiveJobs    int
	Draining      bool
	Healthy       bool
	ConnectedAt   time.Time
	LastHeartbeat time.Time
	Version       string
	Hostname      string
}

// Agents lists the connected agents by id.
func (f *Fleet) Agents() []AgentInfo {
	as := f.reg.list()
	out := make([]AgentInfo, 0, len(as))
	for _, a := range as {
		if !a.live.Load() {
			continue
		}
		a.mu.Lock()
		info := AgentInfo{ID: a.id, Labels: a.labels.Labels, Mandatory: a.labels.Mandatory, MaxJobs: a.maxJobs,
			ActiveJobs: len(a.jobs), Draining: a.draining, Healthy: !a.unhealthy, ConnectedAt: a.connectedAt,
			LastHeartbeat: time.Unix(0, a.c.lastSeen.Load()), Version: a.version, Hostname: a.hostname}
		a.mu.Unlock()
		out = append(out, info)
	}
	return out
}
