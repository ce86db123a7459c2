package agent

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/proto"
)

// agent is one agent process's state: its identity, its jobs, the outbox and
// the current connection. Run creates it.
type agent struct {
	cfg Config
	url string
	id  string
	// secret proves the agent owns id (B113); sent in every register.
	secret string
	labels kiln.Labels
	log    *slog.Logger
	now    func() time.Time
	out    *outbox

	// jobCtx is the parent of every job; the hard stop cancels it.
	jobCtx     context.Context
	cancelJobs context.CancelFunc
	// stopCtx ends with the hard stop.
	stopCtx context.Context
	stopNow context.CancelFunc

	mu       sync.Mutex
	jobs     map[string]*job // running, and finished until their final status is acknowledged
	draining bool
	// announcing holds the finisher back while a drain's agent.status is
	// being written: a finisher woken by some other change would otherwise
	// see the drain and close the connection before the status left.
	announcing bool
	stopping   bool
	sess       *session      // the registered connection; nil when there is none
	servers    []string      // known coordinators (failover.go); empty: only url
	cur        int           // index in servers of the next attempt
	change     chan struct{} // closed and replaced whenever jobs, drain or stop change
	lease      lease
}

var (
	// errFinished ends a session whose drain or stop is complete.
	errFinished = errors.New("agent finished")
	// errSuperseded ends the agent: a newer process with its id connected.
	errSuperseded = errors.New("superseded")
)

// fatalError is a refusal only an operator can fix; the agent stops retrying.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// Run runs an agent until it has drained (Config.Drain closed, or asked by
// the orchestrator), ctx is cancelled (the hard stop), or the orchestrator
// refuses it for good. A clean end returns nil. An invalid Config returns an
// error with code kiln.CodeInvalid whose message is a sentence for the
// person who started the agent.
func Run(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if cfg.Token == "" && cfg.TokenFile != "" {
		token, err := readTokenFile(cfg.TokenFile)
		if err != nil {
			return kiln.Errorf(kiln.CodeInvalid, "%s", err.Error())
		}
		cfg.Token = token
	}
	if err := cfg.validate(); err != nil {
		return kiln.Errorf(kiln.CodeInvalid, "%s", err.Error())
	}
	leaseFile := ""
	if cfg.Runner == nil {
		path, remove, err := leaseFilePath(cfg.StateDir)
		if err != nil {
			return err
		}
		defer remove()
		leaseFile = path
		r, err := newDefaultRunner(cfg, leaseFile)
		if err != nil {
			return err
		}
		cfg.Runner = r
	}
	a, err := newAgent(cfg)
	if err != nil {
		return err
	}
	a.lease.file = leaseFile
	return a.run(ctx)
}

func newAgent(cfg Config) (*agent, error) {
	url, _ := ServerURL(cfg.Server) // validated
	id := cfg.ID
	if id == "" {
		var err error
		if id, err = loadOrCreateID(cfg.StateDir, cfg.Hostname); err != nil {
			return nil, err
		}
	}
	secret, err := agentSecret(cfg)
	if err != nil {
		return nil, err
	}
	a := &agent{
		cfg: cfg, url: url, id: id, secret: secret, labels: effectiveLabels(cfg.Labels),
		log: cfg.Logger, now: cfg.Clock,
		out:    newOutbox(cfg.BufferFrames, cfg.MaxFrameLines, cfg.Clock),
		jobs:   map[string]*job{},
		change: make(chan struct{}),
	}
	a.jobCtx, a.cancelJobs = context.WithCancel(context.Background())
	a.stopCtx, a.stopNow = context.WithCancel(context.Background())
	return a, nil
}

func (a *agent) run(ctx context.Context) error {
	defer a.cancelJobs()
	defer a.stopNow()
	defer a.stopLeaseTimer()
	a.log.Info("agent starting", "agent_id", a.id, "server", a.url, "labels", a.labels.Key(), "max_jobs", a.cfg.MaxJobs)
	// life bounds every connection; it ends StopTimeout after a hard stop.
	life, endLife := context.WithCancel(context.Background())
	defer endLife()
	// Run returns only after watch has: a watcher outliving Run would see
	// the caller cancel ctx afterwards and log a hard stop into a logger
	// its owner has moved on from.
	quit, watched := make(chan struct{}), make(chan struct{})
	defer func() { close(quit); <-watched }()
	go func() {
		defer close(watched)
		a.watch(ctx, quit, endLife)
	}()

	bo := newBackoff(a.cfg.MinReconnectDelay, a.cfg.MaxReconnectDelay)
	for {
		if a.finished() {
			return nil
		}
		if a.isStopping() {
			// Hard stop without a connection: nothing more can be sent.
			a.waitUntil(life, a.noneRunning)
			return nil
		}
		a.checkLease()
		a.waitUntil(life, a.noLostRunning)
		registered, err := a.session(life)
		var fatal *fatalError
		switch {
		case errors.Is(err, errFinished):
			a.log.Info("agent stopped")
			return nil
		case errors.Is(err, errSuperseded):
			a.log.Warn("a newer connection of this agent took over; stopping", "agent_id", a.id)
			a.abandon()
			return nil
		case errors.As(err, &fatal):
			a.log.Error("the orchestrator refused the agent", "err", err)
			a.abandon()
			return fatal.err
		case life.Err() != nil:
			a.log.Warn("stop timeout: exiting with frames not acknowledged", "unacknowledged", a.out.size())
			return nil
		}
		if registered {
			bo.reset()
		} else {
			a.failed()
		}
		if a.isStopping() {
			continue
		}
		d := bo.next()
		if a.cfg.waitHook != nil {
			a.cfg.waitHook(d)
		}
		var leaving *leavingError
		if errors.As(err, &leaving) {
			a.log.Info("the orchestrator went away (stopping or restarting); reconnecting", "err", err, "retry_in", d.Round(time.Millisecond))
		} else {
			a.log.Warn("no connection to the orchestrator", "err", err, "retry_in", d.Round(time.Millisecond))
		}
		a.pause(life, d)
	}
}

// pause waits d before the next attempt, and less when the agent may be able
// to exit instead.
func (a *agent) pause(life context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ch := a.changed()
		if a.finished() || a.isStopping() {
			return
		}
		select {
		case <-t.C:
			return
		case <-life.Done():
			return
		case <-a.stopCtx.Done():
			return
		case <-ch:
		}
	}
}

// watch turns Config.Drain into a drain and ctx's end into the hard stop.
func (a *agent) watch(ctx context.Context, quit <-chan struct{}, endLife func()) {
	drain := a.cfg.Drain
	for {
		select {
		case <-drain:
			drain = nil
			a.drain("asked to drain")
		case <-ctx.Done():
			select {
			case <-quit: // Run has already returned
				return
			default:
			}
			a.hardStop()
			t := time.NewTimer(a.cfg.StopTimeout)
			defer t.Stop()
			select {
			case <-t.C:
				endLife()
			case <-quit:
			}
			return
		case <-quit:
			return
		}
	}
}

// drain takes no new jobs and lets the running ones finish; Run returns once
// they have and everything they reported is acknowledged.
func (a *agent) drain(why string) {
	a.mu.Lock()
	if a.draining {
		a.mu.Unlock()
		return
	}
	a.draining, a.announcing = true, true
	running := a.runningLocked()
	a.mu.Unlock()
	a.log.Info("draining: finishing running jobs, taking no new ones", "why", why, "running", running)
	a.sendStatus()
	a.mu.Lock()
	a.announcing = false
	a.changedLocked() // the finisher may close the connection now
	a.mu.Unlock()
}

// hardStop force-cancels every running job; Run returns once their last
// frames are acknowledged, or StopTimeout later.
func (a *agent) hardStop() {
	a.mu.Lock()
	if a.stopping {
		a.mu.Unlock()
		return
	}
	a.stopping, a.draining = true, true
	execs := a.forceCancelLocked()
	a.changedLocked()
	a.mu.Unlock()
	a.stopNow()
	if len(execs) > 0 {
		a.log.Warn("stopping: force-cancelling running jobs", "running", len(execs))
	} else {
		a.log.Info("stopping")
	}
	for _, x := range execs {
		x.Cancel(true)
	}
	a.cancelJobs()
	a.sendStatus()
}

// abandon ends the agent after a refusal: jobs are force-cancelled and
// awaited for at most StopTimeout, since nothing they report can be sent.
func (a *agent) abandon() {
	a.hardStop()
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StopTimeout)
	defer cancel()
	a.waitUntil(ctx, a.noneRunning)
}

// finished reports whether a draining or stopping agent may exit: no job
// left and every frame acknowledged, or, stopping without a connection, no
// job running.
func (a *agent) finished() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case !a.draining, a.announcing:
		return false
	case a.stopping && a.sess == nil:
		return a.runningLocked() == 0
	}
	return len(a.jobs) == 0 && a.out.size() == 0
}

func (a *agent) isStopping() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stopping
}

func (a *agent) noneRunning() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.runningLocked() == 0
}

// changed returns a channel closed at the next change of jobs, drain, stop
// or acknowledgements. Take it before checking a condition, then wait on it.
func (a *agent) changed() <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.change
}

func (a *agent) changedLocked() {
	close(a.change)
	a.change = make(chan struct{})
}

// waitUntil waits for cond or ctx's end.
func (a *agent) waitUntil(ctx context.Context, cond func() bool) {
	for {
		ch := a.changed()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// sendStatus tells the orchestrator the agent's capacity changed.
func (a *agent) sendStatus() {
	a.mu.Lock()
	s, st := a.sess, &proto.AgentStatus{ActiveJobs: a.runningLocked(), Draining: a.draining}
	a.mu.Unlock()
	if s != nil {
		s.sendLogged(st)
	}
}

// registration is the register frame for a new connection. Jobs the lease
// stopped are not listed: the orchestrator ends them as lost (B126).
func (a *agent) registration() *proto.Register {
	a.checkLease()
	a.mu.Lock()
	defer a.mu.Unlock()
	reg := &proto.Register{
		AgentID: a.id, AgentSecret: a.secret, Labels: a.labels, MaxJobs: a.cfg.MaxJobs,
		Hostname: plain(a.cfg.Hostname, proto.MaxMetadataLen), OS: goos, Arch: goarch,
		Version: plain(a.cfg.Version, proto.MaxMetadataLen), Draining: a.draining,
	}
	for _, j := range a.jobs {
		if j.dropped || j.lost || len(reg.InFlight) == proto.MaxInFlight {
			continue
		}
		reg.InFlight = append(reg.InFlight, proto.InFlight{JobID: j.id, RunID: j.run, LeaseEpoch: j.epoch, Started: j.exec != nil})
	}
	return reg
}

// The OS and architecture reported in the registration.
const (
	goos   = runtime.GOOS
	goarch = runtime.GOARCH
)

func (a *agent) stopLeaseTimer() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.lease.timer != nil {
		a.lease.timer.Stop()
	}
}
