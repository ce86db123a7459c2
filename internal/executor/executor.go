package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Defaults for Config.
const (
	DefaultGracePeriod        = 10 * time.Second
	DefaultStepTimeout        = 30 * time.Minute
	DefaultMaxLogBytesPerStep = 10 << 20
	DefaultMaxLineBytes       = 64 << 10
	DefaultBatchLines         = 50
	DefaultBatchInterval      = 100 * time.Millisecond
	DefaultLogBufferBytes     = 8 << 20
	DefaultMaxOutputBytes     = 1 << 20
	DefaultMaxEnvFileBytes    = 1 << 20
)

// Config tunes an Executor. Zero values take the defaults above.
type Config struct {
	// WorkRoot is the parent of job directories (default $TMPDIR/kiln-work,
	// the agent passes one in its state directory). It must belong to
	// this process's user and not be writable by others; New makes it
	// 0700, or 0711 with a step user (who must reach the job directories).
	WorkRoot           string
	GracePeriod        time.Duration // SIGTERM → SIGKILL on cancel and timeouts
	DefaultStepTimeout time.Duration // for steps without a timeout, and the checkout
	MaxLogBytesPerStep int64         // then one truncation line; the rest is read and dropped
	MaxLineBytes       int           // longer lines are cut into several
	BatchLines         int           // a log batch is sent at this many lines …
	BatchInterval      time.Duration // … or this long after its first line
	LogBufferBytes     int           // queued for the Sink before reading stops
	MaxOutputBytes     int           // all $KILN_OUTPUT keys and values of a job together
	MaxEnvFileBytes    int64         // one step's $KILN_ENV, $KILN_PATH or $KILN_OUTPUT file
	GitPath            string        // "git"
	// BaseEnv is the environment steps start from (default os.Environ());
	// SanitizeEnv removes the agent's own settings and credentials from it.
	BaseEnv []string
	// ShimPath is the binary re-executed to supervise each step; it must
	// call MaybeRunShim first thing in main (default os.Executable()).
	ShimPath string
	// Isolation keeps steps away from the agent and server on the host
	// (off by default; the agent turns it on).
	Isolation Isolation
	// LeaseFile, when set, names a file whose modification time is the
	// deadline of the agent's lease: every step's supervisor watches it and
	// SIGKILLs its step once the clock passes it, so a step stops on time
	// even when the agent itself is frozen (B126). The agent moves the time
	// forward while it hears from its coordinators.
	LeaseFile string
	Clock     func() time.Time
	Logger    *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.WorkRoot == "" {
		c.WorkRoot = filepath.Join(os.TempDir(), "kiln-work")
	}
	if c.GracePeriod == 0 {
		c.GracePeriod = DefaultGracePeriod
	}
	if c.DefaultStepTimeout == 0 {
		c.DefaultStepTimeout = DefaultStepTimeout
	}
	if c.MaxLogBytesPerStep == 0 {
		c.MaxLogBytesPerStep = DefaultMaxLogBytesPerStep
	}
	if c.MaxLineBytes == 0 {
		c.MaxLineBytes = DefaultMaxLineBytes
	}
	if c.BatchLines == 0 {
		c.BatchLines = DefaultBatchLines
	}
	if c.BatchInterval == 0 {
		c.BatchInterval = DefaultBatchInterval
	}
	if c.LogBufferBytes == 0 {
		c.LogBufferBytes = DefaultLogBufferBytes
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.MaxEnvFileBytes == 0 {
		c.MaxEnvFileBytes = DefaultMaxEnvFileBytes
	}
	if c.GitPath == "" {
		c.GitPath = "git"
	}
	if c.BaseEnv == nil {
		c.BaseEnv = os.Environ()
	}
	if c.ShimPath == "" {
		exe, err := os.Executable()
		if err != nil {
			return c, fmt.Errorf("find the kiln binary to supervise steps with: %w", err)
		}
		c.ShimPath = exe
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	switch {
	case c.GracePeriod < 0:
		return c, errors.New("the grace period must not be negative")
	case c.DefaultStepTimeout < 0:
		return c, errors.New("the default step timeout must not be negative")
	case c.MaxLogBytesPerStep < 0:
		return c, errors.New("the per-step log cap must not be negative")
	case c.MaxLineBytes < 256:
		return c, errors.New("the maximum line length must be at least 256 bytes")
	case c.BatchLines < 0 || c.BatchInterval < 0:
		return c, errors.New("log batch sizes must not be negative")
	case c.LogBufferBytes < 0 || c.MaxOutputBytes < 0 || c.MaxEnvFileBytes < 0:
		return c, errors.New("buffer and file limits must not be negative")
	}
	return c, nil
}

// Executor runs jobs. It is safe for concurrent use; each job runs in its
// own directory under Config.WorkRoot.
type Executor struct {
	cfg     Config
	baseEnv []string
	sandbox *sandbox      // read once settled is closed
	settled chan struct{} // the isolation probe has finished
}

// New returns an Executor, creating Config.WorkRoot if needed. With
// Config.Isolation on, one step supervisor is started to learn whether
// this host can isolate steps, and the answer logged: in required mode New
// waits for it and fails where steps cannot be isolated; in auto mode it
// does not wait (jobs do), and where they cannot, it logs a warning and
// steps run unisolated.
func New(cfg Config) (*Executor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	x := &Executor{cfg: cfg, baseEnv: SanitizeEnv(cfg.BaseEnv), settled: make(chan struct{})}
	if u := cfg.Isolation.StepUser; u != nil {
		x.baseEnv = stepUserEnv(x.baseEnv, u)
	}
	// The work root is hidden too: a step sees its own job's directory,
	// not its neighbours'.
	iso := cfg.Isolation
	iso.Hide = append(slices.Clone(iso.Hide), cfg.WorkRoot)
	if x.sandbox, err = newSandbox(iso); err != nil {
		return nil, err
	}
	if err := prepareWorkRoot(cfg.WorkRoot, cfg.Isolation.StepUser); err != nil {
		return nil, err
	}
	removeLeftovers(cfg.WorkRoot, cfg.Logger)
	if cfg.Isolation.Mode == IsolationRequired {
		if err := x.settle(); err != nil {
			return nil, err
		}
		return x, nil
	}
	go x.settle()
	return x, nil
}

// settle probes the sandbox and says what steps get.
func (x *Executor) settle() error {
	defer close(x.settled)
	err := x.sandbox.settle(x.cfg.ShimPath, x.baseEnv)
	var unisolated *isolationError
	if errors.As(err, &unisolated) && x.cfg.Isolation.Mode != IsolationRequired {
		x.cfg.Logger.Warn("steps are NOT isolated: they can see the agent's processes and every file its user can read; see docs/security.md", "reason", unisolated.err.Error())
		err = nil
	}
	if err == nil {
		if d := x.sandbox.describe(); d != "" {
			x.cfg.Logger.Info(d)
		}
	}
	return err
}

// sandboxFor is the sandbox commands start in, once it is settled.
func (x *Executor) sandboxFor() *sandbox {
	<-x.settled
	return x.sandbox
}

// Execution is one job running. Its methods are safe for concurrent use.
type Execution struct {
	x    *Executor
	job  *Job
	em   *emitter
	log  *slog.Logger
	done chan struct{}
	// jobDir is the job's directory, set before the first command runs.
	jobDir string

	cancelOnce, forceOnce, timeoutOnce sync.Once
	cancelled                          chan struct{} // closed by any cancel
	forced                             chan struct{} // closed by a forced cancel or ctx
	timedOut                           chan struct{} // closed when Job.Timeout passes
	stopCtx                            context.Context
	stopAll                            context.CancelFunc // cancels stopCtx: quick git commands

	result Result
}

// Start runs job in the background and reports to sink (nil discards).
// Cancelling ctx is a forced cancel. The job must not change while it runs.
func (x *Executor) Start(ctx context.Context, job *Job, sink Sink) *Execution {
	if sink == nil {
		sink = discardSink{}
	}
	if job == nil {
		job = &Job{} // runs nothing and succeeds
	}
	e := &Execution{
		x:         x,
		job:       job,
		em:        newEmitter(sink, x.cfg.LogBufferBytes),
		log:       x.cfg.Logger.With("run", job.RunID, "job", job.JobID),
		done:      make(chan struct{}),
		cancelled: make(chan struct{}),
		forced:    make(chan struct{}),
		timedOut:  make(chan struct{}),
	}
	e.stopCtx, e.stopAll = context.WithCancel(context.Background())
	stopAfter := context.AfterFunc(ctx, func() { e.Cancel(true) })
	var timer *time.Timer
	if job.Timeout > 0 {
		timer = time.AfterFunc(job.Timeout, func() {
			e.timeoutOnce.Do(func() { close(e.timedOut); e.stopAll() })
		})
	}
	go func() {
		defer close(e.done)
		e.result = e.run()
		stopAfter()
		if timer != nil {
			timer.Stop()
		}
		e.stopAll()
		e.em.close()
	}()
	return e
}

// Cancel stops the job. Graceful: the running step gets SIGTERM, then
// SIGKILL after the grace period, and only steps whose `if:` accepts a
// cancelled job (always(), cancelled()) still run. Forced: the running step
// is killed at once and nothing more runs. Either way the job ends
// cancelled. Cancel may be called again to force a graceful cancel.
func (e *Execution) Cancel(force bool) {
	if force { // first, so whoever sees the cancel also sees it is forced
		e.forceOnce.Do(func() { close(e.forced); e.stopAll() })
	}
	e.cancelOnce.Do(func() { close(e.cancelled) })
}

// Done is closed once the job has finished, every event has been passed to
// the Sink and the workspace is gone (unless kept).
func (e *Execution) Done() <-chan struct{} { return e.done }

// Wait blocks until the job has finished and returns its result.
func (e *Execution) Wait() Result {
	<-e.done
	return e.result
}

func (e *Execution) isCancelled() bool { return isClosed(e.cancelled) }
func (e *Execution) isForced() bool    { return isClosed(e.forced) }
func (e *Execution) isTimedOut() bool  { return isClosed(e.timedOut) }

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// openLease opens Config.LeaseFile for a step's supervisor to watch; nil
// when there is none.
func (x *Executor) openLease() (*os.File, error) {
	if x.cfg.LeaseFile == "" {
		return nil, nil
	}
	f, err := os.Open(x.cfg.LeaseFile)
	if err != nil {
		return nil, fmt.Errorf("open the agent's lease file: %w", err)
	}
	return f, nil
}
