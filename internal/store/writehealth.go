package store

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// writeHealth remembers that a best-effort write failed (B131): the
// database answers reads but cannot write — a full disk, a read-only file
// system, a database in recovery. Authentication writes last_used_at best
// effort, so reads keep working then; readiness reports the problem until a
// write succeeds again.
type writeHealth struct {
	mu    sync.Mutex
	err   error
	since time.Time
}

// bestEffort runs a write whose failure must not fail its caller: the
// failure is logged and remembered for WriteProblem; a success clears it.
func (db *DB) bestEffort(ctx context.Context, what string, fn func(t *txn) error) {
	err := db.update(ctx, fn)
	db.health.mu.Lock()
	defer db.health.mu.Unlock()
	if err == nil {
		if db.health.err != nil {
			db.log.Info("store: the database accepts writes again", "after", what)
		}
		db.health.err = nil
		return
	}
	if ctx.Err() != nil {
		return // the caller went away; it says nothing about the database
	}
	if db.health.err == nil {
		db.health.since = db.cfg.Clock()
		db.log.Error("store: a write failed; reads go on, but the database may be full or read-only", "write", what, "err", err)
	}
	db.health.err = err
}

// bestEffort runs fn as DB.bestEffort does, or, inside the caller's
// transaction, as part of it (its error then is the transaction's).
func (h handle) bestEffort(ctx context.Context, what string, fn func(t *txn) error) error {
	if h.tx != nil {
		return fn(h.tx)
	}
	h.db.bestEffort(ctx, what, fn)
	return nil
}

// WriteProblem is the error of the last best-effort write when it failed
// (nil when it succeeded, or none has run), with since when writes fail.
// ProbeWrite clears it once the database takes a write again.
func (db *DB) WriteProblem() (since time.Time, err error) {
	db.health.mu.Lock()
	defer db.health.mu.Unlock()
	return db.health.since, db.health.err
}

// ProbeWrite tries one small real write — an admin token's last_used_at
// rewritten with its own value, which still needs room in the journal —
// when a write problem is known, and reports the problem left, if any.
func (db *DB) ProbeWrite(ctx context.Context) error {
	if _, err := db.WriteProblem(); err == nil {
		return nil
	}
	db.bestEffort(ctx, "readiness probe", func(t *txn) error {
		_, err := t.exec(ctx, `UPDATE admin_tokens SET last_used_at = last_used_at
			WHERE id = (SELECT id FROM admin_tokens ORDER BY id LIMIT 1)`)
		return err
	})
	since, err := db.WriteProblem()
	if err != nil {
		return fmt.Errorf("the database has not accepted writes since %s: %w", since.UTC().Format(time.RFC3339), err)
	}
	return nil
}
