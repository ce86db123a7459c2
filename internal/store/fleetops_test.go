package store_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// The operations the orchestrator's fleet needs beyond the agent-facing
// ones: the unstarted jobs of a lost agent requeued at once, and tokens
// verified at connect and claimed at registration.

// A lost agent's job that never started is requeued at once (attempt
// counted); a started one keeps its recovery window.
func TestRequeueUnstarted(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b"), job("c")))
		ca := claimJob(t, db, "agent-1", cr.Jobs["a"])
		cb := claimJob(t, db, "agent-1", cr.Jobs["b"])
		cc := claimJob(t, db, "agent-2", cr.Jobs["c"])
		if err := db.Jobs().Start(ctx, lease(ca)); err != nil {
			t.Fatal(err)
		}
		for _, agent := range []string{"agent-1", "agent-2"} {
			if _, err := db.Queue().AgentLost(ctx, agent); err != nil {
				t.Fatal(err)
			}
		}
		res, err := db.Queue().RequeueUnstarted(ctx, "agent-1", "the agent disconnected")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) != 1 || res.Jobs[0].JobID != cb.JobID || res.Jobs[0].Status != kiln.JobQueued ||
			len(res.Queued) != 1 || res.Jobs[0].AgentID != "agent-1" || res.Jobs[0].Epoch != cb.Epoch {
			t.Fatalf("requeued %+v, effects %+v", res.Jobs, res.Effects)
		}
		j := wantStatus(t, db, cb.JobID, kiln.JobQueued)
		if j.Attempts != 1 || j.AgentID != "" {
			t.Fatalf("requeued job %+v", j)
		}
		wantStatus(t, db, ca.JobID, kiln.JobRecovering) // started: keeps its window
		wantStatus(t, db, cc.JobID, kiln.JobRecovering) // another agent's
		// The old lease is dead: the agent's late reports change nothing.
		if err := db.Jobs().Start(ctx, lease(cb)); !errors.Is(err, store.ErrStaleLease) {
			t.Fatalf("late start: %v", err)
		}
		if res, err := db.Queue().RequeueUnstarted(ctx, "agent-1", "again"); err != nil || len(res.Jobs) != 0 {
			t.Fatalf("second call: %+v %v", res.Jobs, err)
		}
	})
}

// A token is verified without being consumed; a single-use token is
// consumed by the first registration and then admits only that agent.
func TestVerifyAndClaimAgentToken(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		a := db.Auth()
		tk, secret, err := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", SingleUse: true})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ { // verifying never consumes
			got, err := a.VerifyAgentToken(ctx, secret)
			if err != nil || got.ID != tk.ID || !got.ConsumedAt.IsZero() {
				t.Fatalf("verify %d: %+v %v", i, got, err)
			}
		}
		if _, err := a.VerifyAgentToken(ctx, "kat_nope"); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("unknown secret: %v", err)
		}
		register := func(agent string) error {
			return db.Update(ctx, func(tx *store.Tx) error {
				if _, err := tx.Auth().ClaimAgentToken(ctx, tk.ID, agent); err != nil {
					return err
				}
				return tx.Auth().UpsertAgent(ctx, store.AgentRecord{ID: agent, TokenID: tk.ID, Labels: linux})
			})
		}
		if err := register("eph-1"); err != nil {
			t.Fatal(err)
		}
		got, err := a.VerifyAgentToken(ctx, secret)
		if err != nil || got.ConsumedAt.IsZero() {
			t.Fatalf("a consumed token still verifies, marked consumed: %+v %v", got, err)
		}
		if err := register("eph-1"); err != nil {
			t.Fatalf("the same agent reconnecting: %v", err)
		}
		if err := register("eph-2"); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("another agent with a consumed token: %v", err)
		}
		if err := a.RevokeAgentToken(ctx, tk.ID); err != nil {
			t.Fatal(err)
		}
		if err := register("eph-1"); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("revoked: %v", err)
		}
		if _, err := a.VerifyAgentToken(ctx, secret); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("revoked verifies: %v", err)
		}

		static, _, err := a.CreateAgentToken(ctx, store.AgentTokenSpec{Name: "static", ExpiresAt: clock.Now().Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		for _, agent := range []string{"s-1", "s-2", "s-1"} {
			if _, err := a.ClaimAgentToken(ctx, static.ID, agent); err != nil {
				t.Fatalf("static token for %s: %v", agent, err)
			}
		}
		clock.Advance(time.Minute)
		if _, err := a.ClaimAgentToken(ctx, static.ID, "s-1"); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("expired: %v", err)
		}
	})
}

// Of several agents registering at once with one fresh single-use token,
// exactly one gets it.
func TestClaimSingleUseTokenRace(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		tk, _, err := db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", SingleUse: true})
		if err != nil {
			t.Fatal(err)
		}
		var ok atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 6; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				agent := "racer-" + string(rune('a'+i))
				err := db.Update(ctx, func(tx *store.Tx) error {
					if _, err := tx.Auth().ClaimAgentToken(ctx, tk.ID, agent); err != nil {
						return err
					}
					return tx.Auth().UpsertAgent(ctx, store.AgentRecord{ID: agent, TokenID: tk.ID, Labels: linux})
				})
				switch {
				case err == nil:
					ok.Add(1)
				case !errors.Is(err, store.ErrUnauthorized):
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		if ok.Load() != 1 {
			t.Fatalf("%d agents registered with one single-use token", ok.Load())
		}
	})
}
