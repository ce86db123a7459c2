package store

import (
	"context"
	"database/sql"
	"sync"
	"sync/atomic"
)

// SQLite parses and plans every statement it is given, and with the pure-Go
// driver that costs more than running a typical statement of this package:
// under a dispatch load, parsing took 40 % of the process's CPU. So on
// SQLite, statements are prepared once and reused (PostgreSQL's driver
// caches prepared statements itself).
//
// The writer pool has one connection, which a transaction holds while it
// runs, so a statement cannot be prepared on the pool from inside one:
// the first run of a statement goes unprepared and a goroutine prepares it
// for the next, once the transaction has released the connection.
// Transactions then use it through Tx.StmtContext, which reuses the
// statement already prepared on their connection.

// maxStmts bounds the cache; statements with expanded IN lists vary in
// length, and past the bound they simply run unprepared.
const maxStmts = 512

type stmtCache struct {
	m       sync.Map // SQL → *sql.Stmt, or nil while being prepared
	n       atomic.Int32
	mu      sync.Mutex
	closed  bool
	pending sync.WaitGroup
}

// get returns the prepared statement for q on pool, or nil: then it starts
// preparing it (in the background when async) for the next use.
func (sc *stmtCache) get(pool *sql.DB, q string, async bool) *sql.Stmt {
	if v, ok := sc.m.Load(q); ok {
		s, _ := v.(*sql.Stmt)
		return s
	}
	if len(q) >= 4096 || sc.n.Load() >= maxStmts {
		return nil
	}
	if _, loaded := sc.m.LoadOrStore(q, nil); loaded {
		return nil
	}
	sc.n.Add(1)
	sc.mu.Lock()
	if sc.closed {
		sc.mu.Unlock()
		return nil
	}
	sc.pending.Add(1)
	sc.mu.Unlock()
	prepare := func() *sql.Stmt {
		defer sc.pending.Done()
		s, err := pool.PrepareContext(context.Background(), q)
		if err != nil {
			sc.m.Delete(q) // retried by a later use
			sc.n.Add(-1)
			return nil
		}
		sc.m.Store(q, s)
		return s
	}
	if async {
		go prepare()
		return nil
	}
	return prepare()
}

// close closes the prepared statements once the preparations under way
// have ended.
func (sc *stmtCache) close() {
	sc.mu.Lock()
	sc.closed = true
	sc.mu.Unlock()
	sc.pending.Wait()
	sc.m.Range(func(_, v any) bool {
		if s, ok := v.(*sql.Stmt); ok && s != nil {
			_ = s.Close()
		}
		return true
	})
}
