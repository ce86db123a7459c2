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
// jobs to idle agents, tell an agent to stop a job, and hear what the
// fleet's own store operations committed (jobs its agents finished, jobs
// requeued after an agent was lost), which the engine applies as it applies
// its own.
type Dispatcher interface {
	Wake(jobs []store.JobRef)
	Cancel(t store.CancelTarget, force bool, reason string)
	// Effects delivers the Effects of the dispatcher's store operations in
	// commit order, and is closed once the dispatcher has stopped.
	Effects() <-chan store.Effects
}

// Config configures the engine.
type Config struct {
	SweepInterval   time.Duration // run deadlines, queue expiry, unroutable jobs, cancel grace
	UnroutableGrace time.Duration // 0: jobs are never failed as unroutable
	CancelGrace     time.Duration // a cancelling job its agent does not confirm is cancelled after this
	Clock           func() time.Time
	Logger          *slog.Logger
	// Hooks are told what the engine does, for metrics.
	Hooks Hooks
	// Leading says whether this server is the cluster's leader, which
	// alone runs the periodic sweeps (nil: always, one server).
	Leading func() bool
	// Scalers, when set, are asked whether they would start an agent for
	// a job no known agent could run: such a job is never unroutable.
	Scalers Scalers
}

// Scalers is the scaler manager as the unroutable probe sees it.
type Scalers interface {
	Serves(r kiln.Requirement) bool
	Names() []string
	// TooBig says why no scaler can start an agent for r when some serve
	// its labels but none can give the resources it asks for ("" else).
	TooBig(r kiln.Requirement) string
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
	db  *store.DB
	d   Dispatcher // nil: no agents to tell
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	watchers map[chan store.RunChange]struct{}
}

// New returns an engine creating runs in db, which must have been opened
// with Release as its Releaser, and waking and cancelling jobs through d
// (the fleet), whose store operations' Effects it applies while it runs. d
// may be nil where nothing dispatches (tests, tools).
func New(db *store.DB, d Dispatcher, cfg Config) *Engine {
	cfg = cfg.withDefaults()
	return &Engine{
		db: db, d: d, cfg: cfg, log: cfg.Logger,
		watchers: map[chan store.RunChange]struct{}{},
	}
}

// Hooks are told what the engine does, for metrics. They are called
// synchronously on the engine's paths, so they must be quick, must not
// block and must not call the engine. A nil field is not called.
type Hooks struct {
	// Applied receives every Effects the engine applies: jobs queued and
	// finished, runs whose status changed.
	Applied func(store.Effects)
	// Unroutable receives how many queued jobs the unroutable probe failed
	// (not those the queue expiry found unroutable).
	Unroutable func(jobs int)
}

// Apply acts on what a store operation committed: queued jobs are offered to
// agents, jobs to cancel are cancelled on their agents, run changes are
// published to watchers. Callers pass every Effects they get from the store.
func (e *Engine) Apply(eff store.Effects) {
	e.apply(eff, "cancelled: another job of the matrix failed (fail_fast)")
}

// apply is Apply with the reason given to agents told to cancel jobs.
func (e *Engine) apply(eff store.Effects, cancelReason string) {
	if e.cfg.Hooks.Applied != nil {
		e.cfg.Hooks.Applied(eff)
	}
	if e.d != nil {
		if len(eff.Queued) > 0 {
			e.d.Wake(eff.Queued)
		}
		for _, t := range eff.Cancel {
			e.d.Cancel(t, false, cancelReason)
		}
	}
	for _, rc := range eff.Runs {
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
	// Hold, when set, creates the runs held for an admin's approval with
	// this reason (Approve releases them).
	Hold string
	// ForkLabels are the mandatory agent labels the jobs of a fork pull
	// request (Event.Fork) may use: its source's fork_labels.
	ForkLabels kiln.Labels
}

// Start creates the runs of an event in one transaction. within, if not nil,
// runs in the same transaction after the runs exist (the ingress marks its
// delivery processed there; the scheduler claims its cron fire), so a crash
// can never create the runs twice or lose them.
func (e *Engine) Start(ctx context.Context, req StartRequest, within func(tx *store.Tx, runs []store.CreatedRun) error) ([]store.CreatedRun, error) {
	var runs []store.CreatedRun
	var inline func(committed bool) claimed
	err := e.db.Update(ctx, func(tx *store.Tx) error {
		if inline != nil { // a rerun: the last attempt's claim did not commit
			inline(false)
			inline = nil
		}
		runs = runs[:0]
		for _, m := range req.Matches {
			decision, err := json.Marshal(m.Decision)
			if err != nil {
				return fmt.Errorf("encode decision: %w", err)
			}
			nr, err := newRun(runInput{
				wf: m.Workflow, content: m.Content, event: req.Event, inputs: m.Inputs, decision: decision,
				source: req.Source, delivery: req.DeliveryID, parent: req.ParentRun, attempt: 1, only: m.Jobs,
				hold: req.Hold, forkLabels: req.ForkLabels,
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
			if err := within(tx, runs); err != nil {
				return err
			}
		}
		var err error
		inline, err = e.claimInline(ctx, tx, runs)
		return err
	})
	var got claimed
	if inline != nil {
		got = inline(err == nil)
	}
	if err != nil {
		return nil, err
	}
	for _, r := range runs {
		r.Effects.Queued = got.unclaimed(r.Effects.Queued)
		e.created(r)
	}
	e.Apply(got.effects)
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
	// The store keeps when the cancel was asked, with the cancel: the cancel
	// grace sweep forces it from there, on this server or another.
	res, err := e.db.Runs().Cancel(ctx, run.ID, reason, force)
	if err != nil {
		return run, err
	}
	// res.Effects.Cancel holds the jobs to stop on their agents.
	e.apply(res.Effects, reason)
	return e.db.Runs().Get(ctx, run.ID)
}

// forceAgents tells the agents of a run's unfinished jobs to kill them now.
func (e *Engine) forceAgents(run store.Run, reason string) {
	if e.d == nil {
		return
	}
	for _, j := range run.Jobs {
		switch j.Status {
		case kiln.JobDispatched, kiln.JobRunning, kiln.JobCancelling:
			if j.AgentID != "" {
				e.d.Cancel(store.CancelTarget{JobID: j.ID, RunID: j.RunID, Name: j.Name, AgentID: j.AgentID, Epoch: j.LeaseEpoch}, true, reason)
			}
		}
	}
}
