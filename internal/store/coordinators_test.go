package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// B141: a leader's write fenced by its lease commits only while the lease
// is held at its epoch; once it lapsed and another took it, the fenced
// transaction changes nothing.
func TestLeaderFence(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		c := db.Cluster()
		l1, ok, err := c.AcquireLease(ctx, "leader", "a", 10*time.Second)
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		fenced := func(l store.LeaderLease, id string) error {
			return db.Update(ctx, func(tx *store.Tx) error {
				if err := tx.Cluster().Fence(ctx, l); err != nil {
					return err
				}
				return tx.Cluster().Beat(ctx, id, "http://"+id)
			})
		}
		if err := fenced(l1, "w1"); err != nil {
			t.Fatalf("the holder's fenced write: %v", err)
		}
		clock.Advance(11 * time.Second)
		if err := fenced(l1, "w2"); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("an expired lease's write: %v", err)
		}
		if _, ok, _ := c.AcquireLease(ctx, "leader", "b", 10*time.Second); !ok {
			t.Fatal("b could not take the lapsed lease")
		}
		if err := fenced(l1, "w3"); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("the old term's write: %v", err)
		}
		ks, err := c.Coordinators(ctx)
		if err != nil || len(ks) != 1 || ks[0].ID != "w1" {
			t.Fatalf("only the first fenced write may have committed: %+v %v", ks, err)
		}
	})
}

// B142, B143, B144: agents connected to a coordinator whose row is silent
// are orphans; a coordinator releases an agent only while the database
// names it the holder; a live coordinator holds the id against other
// tokens.
func TestCoordinatorsAndAgentHolders(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		c, a := db.Cluster(), db.Auth()
		for _, id := range []string{"A", "B"} {
			if err := c.Beat(ctx, id, "http://"+id); err != nil {
				t.Fatal(err)
			}
		}
		reg := func(agent, coord, token string) {
			t.Helper()
			if err := a.UpsertAgent(ctx, store.AgentRecord{ID: agent, Coordinator: coord, TokenID: token,
				Labels: kiln.AgentLabels{Labels: kiln.NewLabels("linux")}}); err != nil {
				t.Fatal(err)
			}
		}
		reg("x", "A", "t1")
		reg("y", "B", "t2")
		live := func() time.Time { return clock.Now().Add(-10 * time.Second) }
		if o := orphans(t, db, "B", live()); len(o) != 0 {
			t.Fatalf("orphans while A is alive: %+v", o)
		}
		if h, tok, _ := a.AgentHolder(ctx, "x", live()); h != "A" || tok != "t1" {
			t.Fatalf("holder of x: %q %q", h, tok)
		}
		// A goes silent; B keeps beating.
		clock.Advance(11 * time.Second)
		if err := c.Beat(ctx, "B", "http://B"); err != nil {
			t.Fatal(err)
		}
		o := orphans(t, db, "B", live())
		if len(o) != 1 || o[0].AgentID != "x" || o[0].Coordinator != "A" {
			t.Fatalf("orphans after A died: %+v", o)
		}
		if h, _, _ := a.AgentHolder(ctx, "x", live()); h != "" {
			t.Fatalf("a dead coordinator still holds x: %q", h)
		}
		// x reconnects to B before A's connection is released: A may not
		// release it any more, and it is no orphan.
		reg("x", "B", "t1")
		if held, err := a.ReleaseAgent(ctx, "x", "A"); err != nil || held {
			t.Fatalf("A released an agent B holds: %v %v", held, err)
		}
		if o := orphans(t, db, "B", live()); len(o) != 0 {
			t.Fatalf("orphans after x moved: %+v", o)
		}
		if held, err := a.ReleaseAgent(ctx, "x", "B"); err != nil || !held {
			t.Fatalf("B releasing its own agent: %v %v", held, err)
		}
		if held, _ := a.ReleaseAgent(ctx, "never-registered", "B"); !held {
			t.Fatal("an agent without a row must count as held")
		}
		// The list shows each agent with its coordinator's URL.
		recs, err := a.ListAgents(ctx)
		if err != nil || len(recs) != 2 || recs[1].ID != "y" || recs[1].CoordinatorURL != "http://B" || !recs[1].Connected {
			t.Fatalf("agents %+v %v", recs, err)
		}
		if moved, err := a.HeldElsewhere(ctx, "A", []string{"x", "y"}); err != nil || len(moved) != 1 || moved[0] != "y" {
			t.Fatalf("held elsewhere: %v %v", moved, err)
		}
		if err := c.Prune(ctx, live()); err != nil {
			t.Fatal(err)
		}
		if ks, _ := c.Coordinators(ctx); len(ks) != 1 || ks[0].ID != "B" {
			t.Fatalf("after prune: %+v", ks)
		}
		if err := c.Leave(ctx, "B"); err != nil {
			t.Fatal(err)
		}
		if o := orphans(t, db, "C", live()); len(o) != 1 || o[0].AgentID != "y" {
			t.Fatalf("a coordinator that left cleanly leaves orphans at once: %+v", o)
		}
	})
}

func orphans(t *testing.T, db *store.DB, self string, liveSince time.Time) []store.OrphanRef {
	t.Helper()
	var out []store.OrphanRef
	err := db.Update(context.Background(), func(tx *store.Tx) error {
		var err error
		out, err = tx.Auth().OrphanedAgents(ctx, self, liveSince)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
