package store

import (
	"context"
	"database/sql"
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
}

// Hold returns a Held writer on db; Close gives its connection back.
func (db *DB) Hold() *Held { return &Held{db: db} }

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
	err := h.db.updateVia(ctx, h.conn, func(t *txn) error { return fn(&Tx{t: t}) })
	if err != nil {
		h.Close()
	}
	return err
}

// Close gives the held connection back to the pool.
func (h *Held) Close() {
	if h.conn != nil {
		_ = h.conn.Close()
		h.conn = nil
	}
}
