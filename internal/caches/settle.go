package caches

import (
	"context"
	"crypto/rand"
	"log/slog"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/store"
)

// DefaultSettleTimeout is caches.upload_settle_timeout.
const DefaultSettleTimeout = 10 * time.Second

// Settle is the cache-upload settle (B217–B219), one per
// server: every cache or artifact upload registers in the database before
// it reads its first byte and unregisters when it ends, stored or not; a
// job's success waits — at most Timeout — until the job has no upload in
// flight before its dependents are released. The records live in the
// database, so a success replayed after a reconnect to this or another
// server still waits for an upload started on the old connection.
type Settle struct {
	db      *store.DB
	timeout time.Duration
	poll    time.Duration
	log     *slog.Logger

	mu    sync.Mutex
	local map[string]chan struct{} // job → closed when one of its uploads here ends
}

// SettleConfig configures a Settle.
type SettleConfig struct {
	// Timeout bounds a success's wait; 0 disables the settle (nothing is
	// recorded or awaited), < 0 means DefaultSettleTimeout.
	Timeout time.Duration
	// Poll is how often a wait reads the database for uploads other
	// servers run (default 100 ms); one of this server's ending wakes it
	// at once.
	Poll   time.Duration
	Logger *slog.Logger
}

// NewSettle returns the server's Settle.
func NewSettle(db *store.DB, cfg SettleConfig) *Settle {
	if cfg.Timeout < 0 {
		cfg.Timeout = DefaultSettleTimeout
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 100 * time.Millisecond
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Settle{db: db, timeout: cfg.Timeout, poll: cfg.Poll, log: cfg.Logger, local: map[string]chan struct{}{}}
}

// Begin records an upload of a job; the returned end records that it
// ended. With the settle disabled it records nothing.
func (s *Settle) Begin(ctx context.Context, jobID, kind, name string) (func(), error) {
	if s == nil || s.timeout == 0 {
		return func() {}, nil
	}
	id := rand.Text()
	if err := s.db.Uploads().Begin(ctx, id, jobID, kind, name); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if err := s.db.Uploads().End(context.WithoutCancel(ctx), id); err != nil {
				// The record stays until retention drops it; waits on it
				// end at their timeout meanwhile.
				s.log.Warn("settle: recording an upload's end failed", "job_id", jobID, "err", err)
			}
			s.mu.Lock()
			if ch := s.local[jobID]; ch != nil {
				close(ch)
				delete(s.local, jobID)
			}
			s.mu.Unlock()
		})
	}, nil
}

// Enabled reports whether successes wait for their jobs' uploads.
func (s *Settle) Enabled() bool { return s != nil && s.timeout != 0 }

// Wait returns once the job has no upload in flight, or Timeout after it
// was called (the records stay until their uploads end), or when ctx
// ends. It returns at once, after one indexed read, when nothing is in
// flight, and without reading anything when the settle is disabled. It
// reports how long it waited.
func (s *Settle) Wait(ctx context.Context, jobID string) time.Duration {
	if s == nil || s.timeout == 0 {
		return 0
	}
	start := time.Now()
	deadline := time.NewTimer(s.timeout)
	defer deadline.Stop()
	defer func() {
		s.mu.Lock()
		delete(s.local, jobID) // a later upload's end finds no waiter
		s.mu.Unlock()
	}()
	for {
		n, err := s.db.Uploads().InFlight(ctx, jobID)
		if err != nil {
			s.log.Warn("settle: reading the job's uploads failed; not waiting", "job_id", jobID, "err", err)
			return time.Since(start)
		}
		if n == 0 {
			return time.Since(start)
		}
		s.mu.Lock()
		ch := s.local[jobID]
		if ch == nil {
			ch = make(chan struct{})
			s.local[jobID] = ch
		}
		s.mu.Unlock()
		tick := time.NewTimer(s.poll)
		select {
		case <-ch:
		case <-tick.C:
		case <-deadline.C:
			tick.Stop()
			s.log.Warn("settle: the job succeeded with uploads still in flight; releasing its dependents after caches.upload_settle_timeout",
				"job_id", jobID, "uploads", n, "timeout", s.timeout)
			return time.Since(start)
		case <-ctx.Done():
			tick.Stop()
			return time.Since(start)
		}
		tick.Stop()
	}
}
