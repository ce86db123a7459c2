package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// A queued job gets one spawn, whichever server claims it first; a job no
// longer queued gets none; a released spawn's token is revoked and the job
// is waiting for a spawn again.
// Proves B170, B171 (docs/behaviours.md).
func TestSpawnClaimOnePerJob(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		a, b := cr.Jobs["a"], cr.Jobs["b"]
		key := linuxReq().Key()
		un, err := db.Scalers().Unserved(ctx, key, 10)
		if err != nil || len(un) != 2 {
			t.Fatalf("unserved %v %v", un, err)
		}
		first := store.Spawn{AgentID: "scaler-process-1", Scaler: "builders", JobID: a, RunID: cr.ID, Owner: "server-1",
			Labels: kiln.NewLabels("linux")}
		if ok, err := db.Scalers().Claim(ctx, first); !ok || err != nil {
			t.Fatalf("first claim %v %v", ok, err)
		}
		second := first
		second.AgentID, second.Owner = "scaler-process-2", "server-2"
		if ok, err := db.Scalers().Claim(ctx, second); ok || err != nil {
			t.Fatalf("a second spawn for the job was claimed: %v %v", ok, err)
		}
		if un, _ := db.Scalers().Unserved(ctx, key, 10); len(un) != 1 || un[0].ID != b {
			t.Fatalf("unserved after the claim: %+v", un)
		}
		c, err := db.Queue().ClaimJob(ctx, "agent-1", linux, b)
		if err != nil || c == nil {
			t.Fatalf("claim b: %v %v", c, err)
		}
		late := first
		late.AgentID, late.JobID = "scaler-process-3", c.JobID
		if ok, _ := db.Scalers().Claim(ctx, late); ok {
			t.Fatal("a spawn was claimed for a dispatched job")
		}
		tk, _, err := db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", SingleUse: true, AgentID: first.AgentID})
		if err != nil {
			t.Fatal(err)
		}
		if err := db.Scalers().SetToken(ctx, first.AgentID, tk.ID); err != nil {
			t.Fatal(err)
		}
		if n, _ := db.Scalers().Count(ctx); n["builders"] != 1 {
			t.Fatalf("count %v", n)
		}
		if ok, err := db.Scalers().Release(ctx, first.AgentID); !ok || err != nil {
			t.Fatalf("release %v %v", ok, err)
		}
		if _, err := db.Auth().ClaimAgentToken(ctx, tk.ID, first.AgentID); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("the released spawn's token still works: %v", err)
		}
		if un, _ := db.Scalers().Unserved(ctx, key, 10); len(un) != 1 || un[0].ID != a {
			t.Fatalf("the job of a released spawn is not waiting for one: %+v", un)
		}
	})
}

// A token bound to an agent id admits that id only, and being single-use
// only that agent from then on.
// Proves B171 (docs/behaviours.md).
func TestBoundTokenAdmitsOnlyItsAgent(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		tk, _, err := db.Auth().CreateAgentToken(ctx, store.AgentTokenSpec{Name: "eph", SingleUse: true,
			AgentID: "scaler-process-aa", Labels: kiln.NewLabels("scaled", "linux")})
		if err != nil {
			t.Fatal(err)
		}
		if tk.AgentID != "scaler-process-aa" {
			t.Fatalf("token %+v", tk)
		}
		if _, err := db.Auth().ClaimAgentToken(ctx, tk.ID, "thief"); !errors.Is(err, store.ErrUnauthorized) {
			t.Fatalf("another agent id used the bound token: %v", err)
		}
		if _, err := db.Auth().ClaimAgentToken(ctx, tk.ID, "scaler-process-aa"); err != nil {
			t.Fatalf("the bound agent was refused: %v", err)
		}
	})
}

// ClaimJob gives one queued job to an agent that accepts it, once, and
// starts the run.
// Proves B170 (docs/behaviours.md).
func TestClaimJobByID(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		cr := mustCreate(t, db, newRun(job("a"), job("b")))
		b := cr.Jobs["b"]
		other := kiln.AgentLabels{Labels: kiln.NewLabels("macos")}
		if c, err := db.Queue().ClaimJob(ctx, "mac", other, b); c != nil || err != nil {
			t.Fatalf("an agent that does not accept the job claimed it: %+v %v", c, err)
		}
		c, err := db.Queue().ClaimJob(ctx, "agent-1", linux, b)
		if err != nil || c == nil || c.JobID != b || c.Epoch != 1 || !c.RunStarted {
			t.Fatalf("claim %+v %v", c, err)
		}
		if again, _ := db.Queue().ClaimJob(ctx, "agent-2", linux, b); again != nil {
			t.Fatal("a dispatched job was claimed again")
		}
		if j := mustJob(t, db, b); j.Status != kiln.JobDispatched || j.AgentID != "agent-1" {
			t.Fatalf("job %+v", j)
		}
		if err := db.Runs().AddRunEvent(ctx, store.RunEvent{RunID: cr.ID, JobID: b, Type: "scaler.ready", Detail: "up"}); err != nil {
			t.Fatal(err)
		}
		if err := db.Runs().AddRunEvent(ctx, store.RunEvent{RunID: cr.ID, Type: "scaler.failed", Detail: "down"}); err != nil {
			t.Fatal(err)
		}
		// The scaler's events, after the store's own (b released, claimed).
		all, _ := db.Runs().Timeline(ctx, cr.ID, "")
		one, _ := db.Runs().Timeline(ctx, cr.ID, b)
		scalerOnly := func(evs []store.RunEvent) []store.RunEvent {
			var out []store.RunEvent
			for _, ev := range evs {
				if strings.HasPrefix(ev.Type, "scaler.") {
					out = append(out, ev)
				}
			}
			return out
		}
		if all, one := scalerOnly(all), scalerOnly(one); len(all) != 2 || all[0].Detail != "up" || all[1].JobID != "" || len(one) != 1 {
			t.Fatalf("timeline %+v / %+v", all, one)
		}
	})
}
