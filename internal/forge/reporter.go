package forge

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/kilnci/kiln"
)

// StatusReporter defaults.
const (
	DefaultStatusDebounce    = 2 * time.Second
	DefaultStatusQueue       = 1000
	DefaultStatusWorkers     = 4
	DefaultStatusRetryBase   = time.Second
	DefaultStatusRetryMax    = 2 * time.Minute
	DefaultStatusMaxAttempts = 10
	DefaultStatusPostTimeout = 30 * time.Second
	// terminalOverflow is how far past QueueSize terminal updates may go
	// before even they are dropped (a memory safety valve for a forge that
	// is down for a long time while many runs finish).
	terminalOverflow = 4
	maxRetryAfter    = time.Hour
)

// StatusPoster posts one commit status; every Repo is one.
type StatusPoster interface {
	PostStatus(ctx context.Context, repo, sha string, st Status) error
}

// PosterLookup finds the poster for a source key (the server's source
// name or id). An error with kiln.CodeNotFound drops the update.
type PosterLookup func(ctx context.Context, sourceKey string) (StatusPoster, error)

// Clock is the time the StatusReporter schedules by; tests inject a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// ReporterConfig tunes a StatusReporter; zero values take the defaults.
type ReporterConfig struct {
	Debounce    time.Duration // a pending update waits this long for newer ones
	QueueSize   int           // updates held at most (see Report)
	Workers     int           // posts in flight at once
	RetryBase   time.Duration // first retry delay; doubles per attempt
	RetryMax    time.Duration // retry delay cap
	MaxAttempts int           // attempts per update before it is dropped
	PostTimeout time.Duration // one post's deadline
	Clock       Clock
	Logger      *slog.Logger
	// Fallback, when set, hears of every update posted as a commit status
	// because GitHub refused its check run (*ChecksRefused), with why; the
	// server records the reason on the run. Called from a post's
	// goroutine.
	Fallback func(sourceKey string, st Status, reason string)
}

func (c ReporterConfig) withDefaults() ReporterConfig {
	if c.Debounce <= 0 {
		c.Debounce = DefaultStatusDebounce
	}
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultStatusQueue
	}
	if c.Workers <= 0 {
		c.Workers = DefaultStatusWorkers
	}
	if c.RetryBase <= 0 {
		c.RetryBase = DefaultStatusRetryBase
	}
	if c.RetryMax <= 0 {
		c.RetryMax = DefaultStatusRetryMax
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultStatusMaxAttempts
	}
	if c.PostTimeout <= 0 {
		c.PostTimeout = DefaultStatusPostTimeout
	}
	if c.Clock == nil {
		c.Clock = realClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// StatusReporter posts commit statuses in the background so that a slow
// or failing forge never holds up a run.
//
// Updates are keyed by (source, repo, sha, context) and only the latest of
// a key is kept. A key's first pending update is posted at once, so even a
// run of a second shows pending on the forge; after a post, a pending
// update waits until Debounce has passed since it for newer ones, so a key
// is posted at most once per Debounce while a run progresses; a terminal
// update (success, failure, error) replaces whatever is waiting and is
// posted at once. A key is never posted twice concurrently, so statuses
// reach the forge in the order they were reported. Failed posts are retried
// with exponential backoff (honouring rate-limit waits) up to MaxAttempts;
// a refusal for good (bad credentials, no such repository) is dropped and
// logged.
//
// Report never blocks. The queue holds QueueSize keys; when it is full a new
// update evicts the oldest pending-state update. Terminal updates are never
// evicted for a pending one: if no pending update is left to evict, a new
// pending update is dropped and a new terminal one is admitted past the cap,
// up to 4×QueueSize, beyond which the oldest terminal update is dropped
// with an error log.
type StatusReporter struct {
	lookup PosterLookup
	cfg    ReporterConfig
	wake   chan struct{}

	mu      sync.Mutex
	entries map[statusKey]*statusEntry
	recent  map[statusKey]time.Time // when a key was last posted, kept for Debounce
	seq     uint64
	stats   ReporterStats
}

// ReporterStats counts what the reporter did.
type ReporterStats struct {
	Queued  int    // updates waiting or in flight
	Posted  uint64 // posts the forge accepted
	Failed  uint64 // updates given up after errors
	Dropped uint64 // updates evicted by a full queue
	// ChecksRefused counts updates posted as commit statuses because
	// GitHub refused their check runs (they count as Posted too).
	ChecksRefused uint64
}

type statusKey struct{ source, repo, sha, context string }

type statusEntry struct {
	key      statusKey
	st       Status
	due      time.Time // when to post next
	holdOff  time.Time // no post before this (retry backoff)
	attempt  int
	seq      uint64 // when first reported: eviction order
	version  uint64 // bumped by every Report; a post of an older one is stale
	inflight bool
}

type postResult struct {
	key     statusKey
	version uint64
	err     error
}

// NewStatusReporter returns a reporter; start it with Run.
func NewStatusReporter(lookup PosterLookup, cfg ReporterConfig) *StatusReporter {
	return &StatusReporter{
		lookup: lookup, cfg: cfg.withDefaults(),
		wake:    make(chan struct{}, 1),
		entries: map[statusKey]*statusEntry{},
		recent:  map[statusKey]time.Time{},
	}
}

// Report queues a status update and returns at once.
func (r *StatusReporter) Report(sourceKey, repo, sha string, st Status) {
	now := r.cfg.Clock.Now()
	k := statusKey{sourceKey, repo, sha, st.Context}
	r.mu.Lock()
	e, ok := r.entries[k]
	if !ok {
		if !r.admit(st.State.Terminal()) {
			r.mu.Unlock()
			r.cfg.Logger.Warn("commit status dropped: queue full", "source", sourceKey, "repo", repo, "sha", sha, "context", st.Context, "state", st.State)
			return
		}
		r.seq++
		due := now
		if last, ok := r.recent[k]; ok && now.Sub(last) < r.cfg.Debounce {
			due = last.Add(r.cfg.Debounce)
		}
		e = &statusEntry{key: k, seq: r.seq, due: due}
		r.entries[k] = e
	} else if !e.st.State.Terminal() && !st.State.Terminal() && !e.inflight {
		// Another pending update inside the debounce window: keep its due time.
	} else {
		e.due = now.Add(r.cfg.Debounce)
	}
	if st.State.Terminal() {
		e.due = now
	}
	if e.due.Before(e.holdOff) {
		e.due = e.holdOff
	}
	e.st, e.attempt = st, 0
	e.version++
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// admit makes room for a new key, or says there is none. Called with mu.
func (r *StatusReporter) admit(terminal bool) bool {
	n := len(r.entries)
	if n < r.cfg.QueueSize {
		return true
	}
	if victim := r.oldest(false); victim != nil {
		delete(r.entries, victim.key)
		r.stats.Dropped++
		return true
	}
	if !terminal {
		r.stats.Dropped++
		return false
	}
	if n < r.cfg.QueueSize*terminalOverflow {
		return true
	}
	if victim := r.oldest(true); victim != nil {
		delete(r.entries, victim.key)
		r.stats.Dropped++
		r.cfg.Logger.Error("commit status dropped: the forge has been failing too long and the queue is full", "repo", victim.key.repo, "sha", victim.key.sha, "context", victim.key.context, "state", victim.st.State)
		return true
	}
	r.stats.Dropped++
	return false
}

// oldest finds the first-reported idle entry in a terminal state or not.
func (r *StatusReporter) oldest(terminal bool) *statusEntry {
	var best *statusEntry
	for _, e := range r.entries {
		if e.inflight || e.st.State.Terminal() != terminal {
			continue
		}
		if best == nil || e.seq < best.seq {
			best = e
		}
	}
	return best
}

// Stats returns counters for metrics and tests.
func (r *StatusReporter) Stats() ReporterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Queued = len(r.entries)
	return s
}

// Run posts updates until ctx is cancelled, then cancels posts in flight,
// waits for them and returns nil. Updates still queued are abandoned.
func (r *StatusReporter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait() // runs after cancel below: posts in flight stop first
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Every post sends one result; at most Workers are in flight, so the
	// sends never block even after Run stopped reading.
	results := make(chan postResult, r.cfg.Workers)
	inflight := 0
	for {
		var timer <-chan time.Time
		next, launch := r.due(r.cfg.Workers - inflight)
		for _, job := range launch {
			inflight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				results <- postResult{key: job.key, version: job.version, err: r.post(ctx, job)}
			}()
		}
		if !next.IsZero() && inflight < r.cfg.Workers {
			timer = r.cfg.Clock.After(next.Sub(r.cfg.Clock.Now()))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		case <-timer:
		case res := <-results:
			inflight--
			r.finish(res)
		}
	}
}

// postJob is a snapshot of an entry taken for posting.
type postJob struct {
	key     statusKey
	version uint64
	st      Status
}

// due marks up to n due entries in flight and returns them, plus the
// earliest due time of the idle entries left (zero if none).
func (r *StatusReporter) due(n int) (time.Time, []postJob) {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	var ready []*statusEntry
	var next time.Time
	for _, e := range r.entries {
		if e.inflight {
			continue
		}
		if !e.due.After(now) {
			ready = append(ready, e)
		} else if next.IsZero() || e.due.Before(next) {
			next = e.due
		}
	}
	// Oldest first, so a burst cannot starve early reports.
	slices.SortFunc(ready, func(a, b *statusEntry) int { return cmp.Compare(a.seq, b.seq) })
	var jobs []postJob
	for i, e := range ready {
		if i >= n {
			if next.IsZero() || e.due.Before(next) {
				next = e.due
			}
			continue
		}
		e.inflight = true
		jobs = append(jobs, postJob{key: e.key, version: e.version, st: e.st})
	}
	return next, jobs
}

func (r *StatusReporter) post(ctx context.Context, job postJob) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PostTimeout)
	defer cancel()
	p, err := r.lookup(ctx, job.key.source)
	if err != nil {
		return err
	}
	err = p.PostStatus(ctx, job.key.repo, job.key.sha, job.st)
	var refused *ChecksRefused
	if !errors.As(err, &refused) {
		return err
	}
	// The update reached GitHub as a commit status: posted, and why not
	// as a check run is logged and handed on.
	r.mu.Lock()
	r.stats.ChecksRefused++
	r.mu.Unlock()
	r.cfg.Logger.Warn("check run refused; posted a commit status instead", "source", job.key.source, "repo", job.key.repo,
		"sha", job.key.sha, "context", job.key.context, "reason", refused.Reason)
	if r.cfg.Fallback != nil {
		r.cfg.Fallback(job.key.source, job.st, refused.Reason)
	}
	return nil
}

// finish records a post's outcome.
func (r *StatusReporter) finish(res postResult) {
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.err == nil {
		r.stats.Posted++
		r.remember(res.key, now)
	}
	e := r.entries[res.key]
	if e == nil {
		return
	}
	e.inflight = false
	if res.err == nil {
		if e.version == res.version {
			delete(r.entries, res.key)
		}
		return
	}
	if e.version != res.version {
		return // a newer update replaced it while in flight; post that one
	}
	e.attempt++
	if !Retryable(res.err) || e.attempt >= r.cfg.MaxAttempts {
		delete(r.entries, res.key)
		r.stats.Failed++
		r.cfg.Logger.Warn("commit status not posted", "source", res.key.source, "repo", res.key.repo, "sha", res.key.sha,
			"context", res.key.context, "state", e.st.State, "attempts", e.attempt, "err", kiln.ErrorMessage(res.err))
		return
	}
	wait := r.backoff(e.attempt)
	var ae *APIError
	if errors.As(res.err, &ae) && ae.RetryAfter > wait {
		wait = min(ae.RetryAfter, maxRetryAfter)
	}
	e.due = now.Add(wait)
	e.holdOff = e.due
}

// remember notes that key was posted at now, forgetting the keys posted
// longer than Debounce ago once there are many. Called with mu.
func (r *StatusReporter) remember(key statusKey, now time.Time) {
	if len(r.recent) >= r.cfg.QueueSize {
		for k, at := range r.recent {
			if now.Sub(at) >= r.cfg.Debounce {
				delete(r.recent, k)
			}
		}
	}
	r.recent[key] = now
}

func (r *StatusReporter) backoff(attempt int) time.Duration {
	d := r.cfg.RetryBase
	for i := 1; i < attempt && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	return min(d, r.cfg.RetryMax)
}
