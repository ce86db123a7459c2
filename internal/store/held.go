package store

import (
	"context"
	"database/sql"
	"time"
)

// Held is one connection kept by a single writer for its transactions, one
// after the other: the fleet's committer, which runs a transaction every
// few milliseconds. On PostgreSQL pgx prepares a statement once per
// connection and text, and a batch's statements vary with its size (an IN
// list per report); spread over the pool, a fifth of the committer's
// statements paid a round trip of their own to be prepared on the
// connection they happened to get (counted in PostgreSQL's log during kiln
// bench). Held on one connection, each is prepared once. SQLite has one
// writer connection already, so there Held is the DB itself.
//
// A Held is not safe for concurrent use.
type Held struct {
	db   *DB
	conn *sql.Conn // nil: take one at the next transaction
	// open is the transaction the last commit began (PostgreSQL), at
	// openedAt: the next Update runs in it, without a BEGIN round trip of
	// its own, unless it has waited past staleOpen.
	open     *sql.Tx
	openedAt time.Time
	// more, when set, reports that another Update follows at once: its
	// commit then also begins the next transaction ("COMMIT; BEGIN").
	more func() bool
}

// staleOpen bounds how long a transaction a commit began waits for its
// Update: the committer asks for one only when its next batch is queued,
// but handing the last batch's effects to a busy engine can hold it up,
// and an operator's idle_in_transaction_session_timeout may be short.
const staleOpen = 500 * time.Millisecond

// Hold returns a Held writer on db; Close gives its connection back. With
// more, each commit after which more reports true also begins the next
// transaction, one round trip for both: the fleet's committer, whose
// queue is never empty at saturation, saves a round trip per batch. It is
// asked only when another Update follows at once, so the connection is
// idle in a transaction only between two batches (at most staleOpen: an
// older one is rolled back and the Update begins its own).
func (db *DB) Hold(more func() bool) *Held { return &Held{db: db, more: more} }

// Update is DB.Update on the held connection. A transaction that fails
// gives the connection back (it may be broken: the database restarted),
// and the next takes a fresh one from the pool.
func (h *Held) Update(ctx context.Context, fn func(tx *Tx) error) error {
	if h.db.dialect.name() != "postgres" {
		return h.db.Update(ctx, fn)
	}
	if h.conn == nil {
		c, err := h.db.write.Conn(ctx)
		if err != nil {
			return h.db.Update(ctx, fn) // the pool reports (or recovers from) what failed
		}
		h.conn = c
	}
	err := h.db.updateVia(ctx, heldConn{h}, func(t *txn) error { return fn(&Tx{t: t}) })
	if err != nil {
		h.Close()
	}
	return err
}

// Close ends a transaction a commit began and gives the held connection
// back to the pool.
func (h *Held) Close() {
	if h.open != nil {
		_ = h.open.Rollback()
		h.open = nil
	}
	if h.conn != nil {
		_ = h.conn.Close()
		h.conn = nil
	}
}

// heldConn is the held connection as updateVia's chainer.
type heldConn struct{ h *Held }

func (c heldConn) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	return c.h.conn.BeginTx(ctx, opts)
}

func (c heldConn) takeOpen() *sql.Tx {
	tx := c.h.open
	c.h.open = nil
	if tx != nil && time.Since(c.h.openedAt) > staleOpen {
		_ = tx.Rollback()
		return nil
	}
	return tx
}

func (c heldConn) chainNext() bool { return c.h.more != nil && c.h.more() }

func (c heldConn) keepOpen(tx *sql.Tx) { c.h.open, c.h.openedAt = tx, time.Now() }
