package store_test

import (
	"errors"
	"testing"
	"time"

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
		h := db.Hold(nil)
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

// A held writer told that another transaction follows at once commits and
// begins that one in one round trip (B157): each transaction's work is
// committed when its Update returns, the next runs in the transaction the
// commit began, a failure there rolls back only its own work, and a
// commit with nothing to follow — or Close — leaves the connection outside
// a transaction, never idle in one.
func TestHeldWriterChainsItsTransactions(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("SQLite's writer is the database's own; nothing to chain")
		}
		more := true
		h := db.Hold(func() bool { return more })
		defer h.Close()
		if _, err := db.SQL().ExecContext(ctx, "CREATE TABLE chained (n int)"); err != nil {
			t.Fatal(err)
		}
		var pid int
		state := func() string {
			t.Helper()
			var s string
			if err := db.SQL().QueryRowContext(ctx, "SELECT state FROM pg_stat_activity WHERE pid = $1", pid).Scan(&s); err != nil {
				t.Fatal(err)
			}
			return s
		}
		rows := func() int {
			t.Helper()
			var n int
			if err := db.SQL().QueryRowContext(ctx, "SELECT count(*) FROM chained").Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		insert := func(fail bool) error {
			return h.Update(ctx, func(tx *store.Tx) error {
				var err error
				if pid, err = store.BackendPID(tx); err != nil {
					return err
				}
				if err := store.ExecIn(tx, "INSERT INTO chained VALUES (1)"); err != nil {
					return err
				}
				if fail {
					return errors.New("the caller's own failure")
				}
				return nil
			})
		}
		if err := insert(false); err != nil {
			t.Fatal(err)
		}
		if n, s := rows(), state(); n != 1 || s != "idle in transaction" {
			t.Fatalf("after a chained commit: %d rows committed, held connection %q; want 1, idle in transaction", n, s)
		}
		first := pid
		if err := insert(false); err != nil {
			t.Fatal(err)
		}
		if n := rows(); n != 2 || pid != first {
			t.Fatalf("the chained transaction: %d rows, backend %d; want 2 on %d", n, pid, first)
		}
		if err := insert(true); err == nil {
			t.Fatal("a failing transaction succeeded")
		}
		if n := rows(); n != 2 {
			t.Fatalf("a failed chained transaction left %d rows, want 2", n)
		}
		more = false
		if err := insert(false); err != nil {
			t.Fatal(err)
		}
		if n, s := rows(), state(); n != 3 || s != "idle" {
			t.Fatalf("after a plain commit: %d rows, held connection %q; want 3, idle", n, s)
		}
		more = true
		if err := insert(false); err != nil {
			t.Fatal(err)
		}
		// A transaction the commit began that waited too long is rolled
		// back, and the next Update begins its own: not the one the
		// commit began (its start, xact_start, is not the Update's now()).
		var begun time.Time
		if err := db.SQL().QueryRowContext(ctx, "SELECT xact_start FROM pg_stat_activity WHERE pid = $1", pid).Scan(&begun); err != nil {
			t.Fatal(err)
		}
		store.AgeOpen(h)
		var started time.Time
		if err := h.Update(ctx, func(tx *store.Tx) error {
			return store.QueryRowIn(tx, "SELECT now()").Scan(&started)
		}); err != nil {
			t.Fatal(err)
		}
		if started.Equal(begun) {
			t.Fatalf("the Update ran in the transaction the commit began at %v, want one of its own", begun)
		}
		h.Close()
		var open int
		if err := db.SQL().QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'").Scan(&open); err != nil {
			t.Fatal(err)
		}
		if n := rows(); n != 4 || open != 0 {
			t.Fatalf("after Close: %d rows, %d sessions idle in a transaction; want 4, 0", n, open)
		}
	})
}
