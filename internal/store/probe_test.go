package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// A readiness probe on PostgreSQL answers while every connection of the
// pool is taken: it has a connection of its own.
func TestProbeReadAnswersWithThePoolFull(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("SQLite's readers open in-process; there is no pool to exhaust")
		}
		for range 2 { // MaxConns
			c, err := db.SQL().Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		var one int
		if err := db.SQL().QueryRowContext(short, "SELECT 1").Scan(&one); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a query through the full pool: %v, want it to wait out its deadline", err)
		}
		probe, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := db.ProbeRead(probe); err != nil {
			t.Fatalf("probe with the pool full: %v", err)
		}
	}, storetest.WithConfig(func(c *store.Config) { c.MaxConns = 2 }))
}

// When PostgreSQL drops the probe's connection (a restart of the database,
// an operator's pg_terminate_backend), the next probe opens a new one
// rather than failing on the dead one.
func TestProbeReadReconnects(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, _ *storetest.Clock) {
		if db.Dialect() != "postgres" {
			t.Skip("SQLite has no server to drop a connection")
		}
		if err := db.ProbeRead(ctx); err != nil {
			t.Fatal(err)
		}
		var killed int
		err := db.SQL().QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`).Scan(&killed)
		if err != nil || killed == 0 {
			t.Fatalf("terminate the store's connections: %d terminated, %v", killed, err)
		}
		if err := db.ProbeRead(ctx); err != nil {
			t.Fatalf("probe after its connection was dropped: %v", err)
		}
	})
}
