package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/trigger"
	"github.com/kilnci/kiln/internal/workflow"
)

// Dispatcher is what the engine needs from the fleet: offer newly queued
// jobs to idle agents, and tell an agent to stop a job.
type Dispatcher interface {
	Wake(jobs []store.JobRef)
	Cancel(t store.CancelTarget, force bool, reason string)
}

// Config configures the engine.
type Config struct {
	SweepInterval   time.Duration // run deadlines, queue expiry, cancel grace
	UnroutableGrace time.Duration // 0: jobs are never failed as unroutable
	CancelGrace     time.Duration // a cancelling job its agent does not confirm is cancelled after this
	Clock           func() time.Time
	Logger          *slog.Logger
}

// Defaults.
const (
	DefaultSweepInterval   = time.Second
	DefaultUnroutableGrace = 2 * time.Minute
	DefaultCancelGrace     = time.Minute
)

func (c Config) withDefaults() Config {
	if c.SweepInterval <= 0 {
		c.SweepInterval = DefaultSweepInterval
	}
	if c.UnroutableGrace < 0 {
		c.UnroutableGrace = 0
	}
	if c.CancelGrace <= 0 {
		c.CancelGrace = DefaultCancelGrace
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Engine creates runs and applies the consequences of every store change.
type Engine struct {
	db  *store.DB // with the engine's Releaser
	cfg Config
	log *slog.Logger

	mu         sync.Mutex
	dispatcher Dispatcher
	hooks      Hooks
	watchers   map[chan store.RunChange]struct{}
	cancelAt   map[string]time.Time // run id → when a graceful cancel was asked
	unroutable map[string]time.Time // job id → since when no known agent could run it
}

// New returns an engine over db. Use DB() for every store operation that can
// release jobs, so they are released through the engine.
func New(db *store.DB, cfg Config) *Engine {
	cfg = cfg.withDefaults()
	e := &Engine{
		cfg: cfg, log: cfg.Logger,
		watchers: map[chan store.RunChange]struct{}{}, cancelAt: map[string]time.Time{}, unroutable: map[string]time.Time{},
	}
	e.db = db.WithReleaser(release)
	return e
}

// DB is the store handle whose operations release jobs through the engine.
func (e *Engine) DB() *store.DB { return e.db }

// Attach connects the dispatcher (the fleet); the two depend on each other,
// so the composition root builds the engine, then the fleet, then attaches.
func (e *Engine) Attach(d Dispatcher) {
	e.mu.Lock()
	e.dispatcher = d
	e.mu.Unlock()
}

// Hooks are told what the engine does, for metrics. They are called
// synchronously on the engine's paths (the fleet's commit loop among them),
// so they must be quick, must not block and must not call the engine. A nil
// field is not called.
type Hooks struct {
	// Applied receives every Effects the engine applies: jobs queued and
	// finished, runs whose status changed.
	Applied func(store.Effects)
	// Unroutable receives how many queued jobs the unroutable probe failed
	// (not those the queue expiry found unroutable).
	Unroutable func(jobs int)
}

// SetHooks installs the hooks, replacing any installed before.
func (e *Engine) SetHooks(h Hooks) {
	e.mu.Lock()
	e.hooks = h
	e.mu.Unlock()
}

// Apply acts on what a store operation committed: queued jobs are offered to
// agents, jobs to cancel are cancelled on their agents, run changes are
// published to watchers. Callers pass every Effects they get from the store.
func (e *Engine) Apply(eff store.Effects) {
	e.apply(eff, "cancelled: another job of the matrix failed (fail_fast)")
}

// apply is Apply with the reason given to agents told to cancel jobs.
func (e *Engine) apply(eff store.Effects, cancelReason string) {
	e.mu.Lock()
	d, applied := e.dispatcher, e.hooks.Applied
	e.mu.Unlock()
	if applied != nil {
		applied(eff)
	}
	if d != nil {
		if len(eff.Queued) > 0 {
			d.Wake(eff.Queued)
		}
		for _, t := range eff.Cancel {
			d.Cancel(t, false, cancelReason)
		}
	}
	for _, rc := range eff.Runs {
		if rc.Status.Terminal() {
			e.mu.Lock()
			delete(e.cancelAt, rc.ID)
			e.mu.Unlock()
		}
		e.publish(rc)
	}
}

// Watch returns a channel of run status changes; call stop when done. A
// watcher that does not keep up misses changes rather than slowing runs.
func (e *Engine) Watch(buffer int) (<-chan store.RunChange, func()) {
	c := make(chan store.RunChange, max(buffer, 16))
	e.mu.Lock()
	e.watchers[c] = struct{}{}
	e.mu.Unlock()
	return c, func() {
		e.mu.Lock()
		delete(e.watchers, c)
		e.mu.Unlock()
	}
}

func (e *Engine) publish(rc store.RunChange) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for c := range e.watchers {
		select {
		case c <- rc:
		default:
		}
	}
}

// Match is one workflow an event matched.
type Match struct {
	Workflow *workflow.Workflow
	Content  []byte // the workflow file, kept for reruns
	Decision trigger.Decision
	Inputs   map[string]any // dispatch inputs, coerced to the workflow's declared types
	// Jobs, when not empty, limits the run to these job ids and the jobs
	// they need, directly or not (kiln run --job).
	Jobs []string
}

// StartRequest creates one run per matched workflow of one event.
type StartRequest struct {
	Source     string
	Event      *kiln.Event
	Matches    []Match
	DeliveryID int64
	ParentRun  string
}

// Start creates the runs of an event in one transaction. within, if not nil,
// runs in the same transaction after the runs exist (the ingress marks its
// delivery processed there; the scheduler claims its cron fire), so a crash
// can never create the runs twice or lose them.
func (e *Engine) Start(ctx context.Context, req StartRequest, within func(tx *store.Tx, runs []store.CreatedRun) error) ([]store.CreatedRun, error) {
	var runs []store.CreatedRun
	err := e.db.Update(ctx, func(tx *store.Tx) error {
		runs = runs[:0]
		for _, m := range req.Matches {
			decision, err := json.Marshal(m.Decision)
			if err != nil {
				return fmt.Errorf("encode decision: %w", err)
			}
			nr, err := newRun(runInput{
				wf: m.Workflow, content: m.Content, event: req.Event, inputs: m.Inputs, decision: decision,
				source: req.Source, delivery: req.DeliveryID, parent: req.ParentRun, attempt: 1, only: m.Jobs,
			})
			if err != nil {
				return err
			}
			cr, err := tx.Runs().Create(ctx, nr)
			if err != nil {
				return fmt.Errorf("create run of %s: %w", m.Workflow.Name, err)
			}
			runs = append(runs, cr)
		}
		if within != nil {
			return within(tx, runs)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		e.created(r)
	}
	return runs, nil
}

// created announces a new run to watchers (commit statuses show it as
// pending at once) and applies what its creation committed.
func (e *Engine) created(r store.CreatedRun) {
	e.publish(store.RunChange{ID: r.ID, Number: r.Number, Status: kiln.RunPending})
	e.Apply(r.Effects)
}

// Cancel cancels a run. The first request is graceful (agents get SIGTERM,
// a grace period, then SIGKILL); a second request on a run that is still
// cancelling forces it: agents kill at once and the run ends now.
func (e *Engine) Cancel(ctx context.Context, runID, reason string) (store.Run, error) {
	run, err := e.db.Runs().Get(ctx, runID)
	if err != nil {
		return store.Run{}, err
	}
	if run.Status.Terminal() {
		return run, kiln.Errorf(kiln.CodeConflict, "run #%d already finished (%s)", run.Number, run.Status)
	}
	force := run.Status == kiln.RunCancelling
	if reason == "" {
		reason = "cancelled"
	}
	if force {
		e.forceAgents(run, reason)
	}
	res, err := e.db.Runs().Cancel(ctx, run.ID, reason, force)
	if err != nil {
		return run, err
	}
	if !force {
		e.mu.Lock()
		if _, ok := e.cancelAt[run.ID]; !ok {
			e.cancelAt[run.ID] = e.cfg.Clock()
		}
		e.mu.Unlock()
	}
	// res.Effects.Cancel holds the jobs to stop on their agents.
	e.apply(res.Effects, reason)
	return e.db.Runs().Get(ctx, run.ID)
}

// forceAgents tells the agents of a run's unfinished jobs to kill them now.
func (e *Engine) forceAgents(run store.Run, reason string) {
	e.mu.Lock()
	d := e.dispatcher
	e.mu.Unlock()
	if d == nil {
		return
	}
	for _, j := range run.Jobs {
		switch j.Status {
		case kiln.JobDispatched, kiln.JobRunning, kiln.JobCancelling:
			if j.AgentID != "" {
				d.Cancel(store.CancelTarget{JobID: j.ID, RunID: j.RunID, Name: j.Name, AgentID: j.AgentID, Epoch: j.LeaseEpoch}, true, reason)
			}
		}
	}
}
