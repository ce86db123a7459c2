package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// A database that answers reads but refuses writes: authentication still
// succeeds (its last_used_at write is best effort), the failure is
// remembered for readiness, a probe write reports it, and once writes work
// again the probe clears it.
// Proves B131.
func TestAuthenticationReadsWhenWritesFail(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		if db.Dialect() != "sqlite" {
			t.Skip("the writer is made read-only with a SQLite pragma")
		}
		_, secret, err := db.Auth().CreateAdminToken(ctx, "ops", time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.SetQueryOnly(db, true); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Auth().AuthenticateAdmin(ctx, secret); err != nil {
			t.Fatalf("authentication failed with writes refused: %v", err)
		}
		if _, err := db.Runs().List(ctx, store.RunFilter{Limit: 1}); err != nil {
			t.Fatalf("a read failed: %v", err)
		}
		if _, err := db.WriteProblem(); err == nil {
			t.Fatal("the failed write was not remembered")
		}
		if err := db.ProbeWrite(ctx); err == nil || !strings.Contains(err.Error(), "has not accepted writes since") {
			t.Fatalf("probe with writes refused: %v", err)
		}
		if err := store.SetQueryOnly(db, false); err != nil {
			t.Fatal(err)
		}
		if err := db.ProbeWrite(ctx); err != nil {
			t.Fatalf("probe once writes work: %v", err)
		}
		if _, err := db.WriteProblem(); err != nil {
			t.Fatalf("the problem was not cleared: %v", err)
		}
	})
}
