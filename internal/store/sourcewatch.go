package store

import (
	"context"
	"sync"
)

// SourcesChannel is the PostgreSQL notification channel of source
// changes: every write of the sources table sends the source's id on it
// from inside its transaction, so PostgreSQL delivers it when (and only
// if) the write commits, to every server listening — each drops its
// cached forge client of that source (ingress.Sources).
const SourcesChannel = "kiln_sources"

// sourceWatchers are the WatchSources callbacks of one DB.
type sourceWatchers struct {
	mu   sync.Mutex
	next int
	fns  map[int]func(id string)
}

// WatchSources calls fn with a source's id after every write of it
// (create, update, delete) through this DB, before the write returns to
// its caller — so a cache dropped in fn never serves the old row to
// anything that follows the write in this process. It is also called
// after a write that failed, when it may have committed (a cache dropped
// for nothing only costs a read). fn runs on the writer's goroutine: it
// must be quick and must not use the store. The other servers sharing a
// PostgreSQL database learn of the write on SourcesChannel. stop ends the
// watch.
func (db *DB) WatchSources(fn func(id string)) (stop func()) {
	w := &db.sourceWatch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]func(string){}
	}
	k := w.next
	w.next++
	w.fns[k] = fn
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.fns, k)
	}
}

// sourcesWritten tells the watchers which sources a transaction wrote.
func (db *DB) sourcesWritten(ids []string) {
	w := &db.sourceWatch
	w.mu.Lock()
	fns := make([]func(string), 0, len(w.fns))
	for _, fn := range w.fns {
		fns = append(fns, fn)
	}
	w.mu.Unlock()
	for _, id := range ids {
		for _, fn := range fns {
			fn(id)
		}
	}
}

// sourceWritten records in the transaction that it wrote a source: its
// watchers hear of it once the transaction ends, and on PostgreSQL the
// notification to the other servers is queued in the transaction itself,
// so it goes out with the commit and never without it.
func (t *txn) sourceWritten(ctx context.Context, id string) error {
	t.sources = append(t.sources, id)
	if t.db.dialect.name() != "postgres" {
		return nil
	}
	_, err := t.exec(ctx, "SELECT pg_notify(?, ?)", SourcesChannel, id)
	return err
}
