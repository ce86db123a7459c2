package store_test

import (
	"errors"
	"testing"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// A held writer (the fleet's committer) runs its transactions on one
// PostgreSQL connection, so the statements it prepares stay prepared; when
// that connection dies (the database restarted, an operator ended it), the
// transaction on it fails and the next takes a fresh connection. On SQLite
// it is the database's one writer.
func TestHeldWriterKeepsOneConnectionAndReplacesALostOne(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		h := db.Hold()
		defer h.Close()
		mustCreate(t, db, newRun(job("a")))
		if db.Dialect() != "postgres" {
			if err := h.Update(ctx, func(tx *store.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
			return
		}
		pid := func() (int, error) {
			var p int
			err := h.Update(ctx, func(tx *store.Tx) error {
				var err error
				p, err = store.BackendPID(tx)
				return err
			})
			return p, err
		}
		first, err := pid()
		if err != nil {
			t.Fatal(err)
		}
		// Other writers meanwhile take connections of their own.
		for range 3 {
			mustCreate(t, db, newRun(job("b")))
		}
		for range 3 {
			// A writer taking a pool connection now would get the one
			// the last transaction gave back (the pool reuses the most
			// recent first), were it not held.
			other, err := db.SQL().Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			p, err := pid()
			_ = other.Close()
			if err != nil || p != first {
				t.Fatalf("transaction on backend %d (%v), want the held %d", p, err, first)
			}
		}
		if _, err := db.SQL().ExecContext(ctx, "SELECT pg_terminate_backend($1)", first); err != nil {
			t.Fatal(err)
		}
		if _, err := pid(); err == nil {
			t.Fatal("a transaction on the ended connection succeeded")
		}
		next, err := pid()
		if err != nil || next == first {
			t.Fatalf("after the loss: backend %d (%v), want a fresh one", next, err)
		}
		if err := h.Update(ctx, func(tx *store.Tx) error { return errors.New("the caller's own failure") }); err == nil {
			t.Fatal("a failing transaction succeeded")
		}
		if _, err := pid(); err != nil {
			t.Fatalf("after a failed transaction: %v", err)
		}
	})
}
