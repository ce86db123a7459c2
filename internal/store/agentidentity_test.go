package store_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// An agent id is bound to the first secret registered with it: a second
// one is refused (checked and bound), also when two servers bind the id
// with different secrets at the same moment (one wins); an id recorded
// before secrets existed is bound by its next registration; a token bound
// to an agent id is claimed for that id only.
// Proves B113 (docs/behaviours.md).
func TestAgentSecretBinding(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		mine, theirs := store.HashToken("kas_mine"), store.HashToken("kas_theirs")
		if err := a.CheckAgentSecret(ctx, "a-1", theirs); err != nil {
			t.Fatalf("an unknown id: %v", err)
		}
		if err := a.BindAgentSecret(ctx, "a-1", mine); err != nil {
			t.Fatal(err)
		}
		if err := a.BindAgentSecret(ctx, "a-1", mine); err != nil {
			t.Fatalf("the same secret again: %v", err)
		}
		if err := a.CheckAgentSecret(ctx, "a-1", mine); err != nil {
			t.Fatal(err)
		}
		if err := a.CheckAgentSecret(ctx, "a-1", theirs); !errors.Is(err, store.ErrAgentIDBound) || kiln.ErrorCode(err) != kiln.CodeConflict {
			t.Fatalf("check with another secret: %v", err)
		}
		if err := a.BindAgentSecret(ctx, "a-1", theirs); !errors.Is(err, store.ErrAgentIDBound) {
			t.Fatalf("bind another secret: %v", err)
		}

		// Racing first registrations: exactly one secret wins.
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				errs[i] = a.BindAgentSecret(ctx, "raced", store.HashToken(string(rune('a'+i))))
			})
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, store.ErrAgentIDBound):
				t.Fatal(err)
			}
		}
		if won != 1 {
			t.Fatalf("%d secrets bound one id: %v", won, errs)
		}

		// A row recorded without a secret (before the upgrade) is bound by
		// the next registration, and then holds.
		if err := a.UpsertAgent(ctx, store.AgentRecord{ID: "old", TokenID: "t"}); err != nil {
			t.Fatal(err)
		}
		if err := a.CheckAgentSecret(ctx, "old", theirs); err != nil {
			t.Fatalf("an unbound row: %v", err)
		}
		if err := a.BindAgentSecret(ctx, "old", mine); err != nil {
			t.Fatal(err)
		}
		if err := a.CheckAgentSecret(ctx, "old", theirs); !errors.Is(err, store.ErrAgentIDBound) {
			t.Fatalf("after binding: %v", err)
		}

		// A token bound to an id.
		tk, _, err := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", SingleUse: true, AgentID: "eph-1"})
		if err != nil || tk.AgentID != "eph-1" {
			t.Fatalf("%+v %v", tk, err)
		}
		if _, err := a.ClaimAgentToken(ctx, tk.ID, "eph-2"); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("claimed for another id: %v", err)
		}
		if got, err := a.ClaimAgentToken(ctx, tk.ID, "eph-1"); err != nil || got.AgentID != "eph-1" {
			t.Fatalf("%+v %v", got, err)
		}
	})
}
