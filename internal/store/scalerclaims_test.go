package store_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// An event spawn's claim code is stored as its hash only, redeemed once
// and before it expires for a fresh secret of the spawn's token (bound to
// its agent id and labels; the secret the manager made no longer works);
// a reused, expired, wrong or malformed code is refused alike; of two
// redemptions at once one wins.
// Proves B148, B149 (docs/behaviours.md).
func TestClaimCodeRedeemedOnce(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		spawn := func(agent, jobID string) (string, string) {
			t.Helper()
			sp := store.Spawn{AgentID: agent, Scaler: "cloud", JobID: jobID, RunID: cr.ID, Owner: "server-1", Labels: kiln.NewLabels("linux", "cloud")}
			if ok, err := db.Scalers().Claim(ctx, sp); !ok || err != nil {
				t.Fatalf("claim %v %v", ok, err)
			}
			tk, secret, err := db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", SingleUse: true, AgentID: agent,
				Labels: sp.Labels, Mandatory: kiln.NewLabels("cloud"), ExpiresAt: clock.Now().Add(time.Hour)})
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Scalers().SetToken(ctx, agent, tk.ID); err != nil {
				t.Fatal(err)
			}
			code, err := store.NewClaimCode()
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Scalers().AddClaim(ctx, store.ScalerClaim{Code: code, AgentID: agent, Scaler: "cloud",
				ServerURL: "http://kiln.test", ExpiresAt: clock.Now().Add(5 * time.Minute)}); err != nil {
				t.Fatal(err)
			}
			return code, secret
		}
		code, oldSecret := spawn("scaler-event-00000001", cr.Jobs["a"])
		if !store.ValidClaimCode(code) || !strings.HasPrefix(code, store.ClaimCodePrefix) {
			t.Fatalf("claim code %q", code)
		}
		bad := func(what, c string) {
			t.Helper()
			if _, err := db.Scalers().RedeemClaim(ctx, c); !errors.Is(err, store.ErrUnauthorized) || kiln.ErrorCode(err) != kiln.CodeUnauthorized {
				t.Fatalf("%s redeemed: %v", what, err)
			}
		}
		wrong, _ := store.NewClaimCode()
		bad("a wrong code", wrong)
		bad("a malformed code", "kcl_short")
		bad("an empty code", "")
		bad("a token given as a code", oldSecret)
		bad("the code in upper case", strings.ToUpper(code))
		got, err := db.Scalers().RedeemClaim(ctx, code)
		if err != nil {
			t.Fatalf("redeem: %v", err)
		}
		if got.AgentID != "scaler-event-00000001" || got.Labels.Key() != "cloud,linux" || got.Mandatory.Key() != "cloud" ||
			got.ServerURL != "http://kiln.test" || !strings.HasPrefix(got.Token, store.AgentTokenPrefix) || got.Token == oldSecret {
			t.Fatalf("redeemed %+v", got)
		}
		bad("a reused code", code)
		if _, err := db.Auth().VerifyAgentToken(ctx, oldSecret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("the manager's secret still works after the redemption: %v", err)
		}
		tk, err := db.Auth().VerifyAgentToken(ctx, got.Token)
		if err != nil || tk.AgentID != got.AgentID || !tk.SingleUse {
			t.Fatalf("the redeemed token: %+v %v", tk, err)
		}
		var raw string
		if err := db.SQL().QueryRowContext(ctx, "SELECT hash FROM scaler_claims WHERE agent_id = 'scaler-event-00000001'").Scan(&raw); err != nil || raw == code || raw != store.HashToken(code) {
			t.Fatalf("stored %q (%v): only the hash may be stored", raw, err)
		}

		// Expired: refused even though never used.
		late, _ := spawn("scaler-event-00000002", cr.Jobs["b"])
		clock.Advance(5 * time.Minute)
		bad("an expired code", late)
		// Both are past their deadline: the redeemed one had a minute from
		// its redemption to register, the other its claim's expiry.
		un, err := db.Scalers().Unarrived(ctx, 10)
		if err != nil || len(un) != 2 || un[0].AgentID != "scaler-event-00000001" || !un[0].Redeemed ||
			un[1].JobID != cr.Jobs["b"] || un[1].Redeemed {
			t.Fatalf("unarrived %+v %v", un, err)
		}
		if _, err := db.Scalers().Registered(ctx, "scaler-event-00000001"); err != nil {
			t.Fatal(err)
		}
		if ok, err := db.Scalers().ReapUnarrived(ctx, "scaler-event-00000001"); ok || err != nil {
			t.Fatalf("a registered agent's spawn was reaped: %v %v", ok, err)
		}
		var wins int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				ok, err := db.Scalers().ReapUnarrived(ctx, "scaler-event-00000002")
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d reapers won", wins)
		}
		if un, _ := db.Scalers().Unarrived(ctx, 10); len(un) != 0 {
			t.Fatalf("unarrived after the reap %+v", un)
		}
		if _, err := db.Scalers().Release(ctx, "scaler-event-00000001"); err != nil {
			t.Fatal(err)
		}
		if n, err := db.Scalers().PruneClaims(ctx); err != nil || n != 1 {
			t.Fatalf("pruned %d %v", n, err)
		}
	})
}

// Two redemptions of one code at once: exactly one gets the token.
// Proves B149 (docs/behaviours.md).
func TestClaimCodeConcurrentRedemption(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		sp := store.Spawn{AgentID: "scaler-event-0000000a", Scaler: "cloud", Owner: "s", Labels: kiln.NewLabels("linux")}
		if ok, err := db.Scalers().Claim(ctx, sp); !ok || err != nil {
			t.Fatal(ok, err)
		}
		tk, _, _ := db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", SingleUse: true, AgentID: sp.AgentID, Labels: sp.Labels})
		_ = db.Scalers().SetToken(ctx, sp.AgentID, tk.ID)
		code, _ := store.NewClaimCode()
		if err := db.Scalers().AddClaim(ctx, store.ScalerClaim{Code: code, AgentID: sp.AgentID, Scaler: "cloud", ExpiresAt: clock.Now().Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		wins := 0
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				if _, err := db.Scalers().RedeemClaim(ctx, code); err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				} else if !errors.Is(err, store.ErrUnauthorized) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("%d redemptions won", wins)
		}
	})
}
