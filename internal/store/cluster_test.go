package store_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestLogIndex(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		l := db.Logs()
		if hw, err := l.HighWater(ctx, "j1", 0); hw != 0 || err != nil {
			t.Fatalf("empty high water %d %v", hw, err)
		}
		err := l.Append(ctx,
			store.Chunk{JobID: "j1", Step: 0, FirstSeq: 1, LastSeq: 10, Offset: 0, Length: 400},
			store.Chunk{JobID: "j1", Step: 0, FirstSeq: 11, LastSeq: 12, Offset: 400, Length: 80},
			store.Chunk{JobID: "j1", Step: 1, FirstSeq: 1, LastSeq: 3, Offset: 480, Length: 90},
		)
		if err != nil {
			t.Fatal(err)
		}
		// A replayed chunk changes nothing; the mark never goes down.
		if err := l.Append(ctx, store.Chunk{JobID: "j1", Step: 0, FirstSeq: 1, LastSeq: 10, Offset: 999, Length: 1}); err != nil {
			t.Fatal(err)
		}
		if hw, _ := l.HighWater(ctx, "j1", 0); hw != 12 {
			t.Fatalf("high water %d", hw)
		}
		cs, err := l.Chunks(ctx, "j1", 0, 10)
		if err != nil || len(cs) != 1 || cs[0].Offset != 400 {
			t.Fatalf("chunks after 10: %+v %v", cs, err)
		}
		cs, _ = l.Chunks(ctx, "j1", 0, 0)
		if len(cs) != 2 || cs[0].Offset != 0 || cs[0].Length != 400 {
			t.Fatalf("all chunks %+v", cs)
		}
		for _, bad := range []store.Chunk{{JobID: "j", FirstSeq: 0, LastSeq: 1}, {JobID: "j", FirstSeq: 5, LastSeq: 4}, {JobID: "j", FirstSeq: 1, LastSeq: 1, Offset: -1}} {
			if err := l.Append(ctx, bad); !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("bad chunk %+v: %v", bad, err)
			}
		}
	})
}

func TestLeaderLease(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		c := db.Cluster()
		l1, ok, err := c.AcquireLease(ctx, "leader", "coord-1", 10*time.Second)
		if err != nil || !ok || l1.Epoch != 1 || l1.Holder != "coord-1" {
			t.Fatalf("acquire %+v %v %v", l1, ok, err)
		}
		l2, ok, _ := c.AcquireLease(ctx, "leader", "coord-2", 10*time.Second)
		if ok || l2.Holder != "coord-1" || l2.Epoch != 1 {
			t.Fatalf("a held lease was taken: %+v %v", l2, ok)
		}
		// Re-acquiring while held is a renewal: same epoch.
		clock.Advance(5 * time.Second)
		again, ok, _ := c.AcquireLease(ctx, "leader", "coord-1", 10*time.Second)
		if !ok || again.Epoch != 1 || !again.ExpiresAt.Equal(clock.Now().Add(10*time.Second)) {
			t.Fatalf("re-acquire %+v %v", again, ok)
		}
		l1, err = c.RenewLease(ctx, again, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// coord-1 stalls past the expiry; coord-2 takes over with a new epoch.
		clock.Advance(10 * time.Second)
		l2, ok, _ = c.AcquireLease(ctx, "leader", "coord-2", 10*time.Second)
		if !ok || l2.Epoch != 2 || l2.Holder != "coord-2" {
			t.Fatalf("take over %+v %v", l2, ok)
		}
		// The old holder's renewal is refused: its epoch is fenced off.
		if _, err := c.RenewLease(ctx, l1, 10*time.Second); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("renew by the old holder: %v", err)
		}
		cur, err := c.Lease(ctx, "leader")
		if err != nil || cur.Holder != "coord-2" || cur.Epoch != 2 {
			t.Fatalf("lease %+v %v", cur, err)
		}
		// A clean release lets another take it at once.
		if err := c.ReleaseLease(ctx, l2); err != nil {
			t.Fatal(err)
		}
		l3, ok, _ := c.AcquireLease(ctx, "leader", "coord-3", 10*time.Second)
		if !ok || l3.Epoch != 3 {
			t.Fatalf("after release %+v %v", l3, ok)
		}
		if _, err := c.Lease(ctx, "nothing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown lease: %v", err)
		}
		if _, _, err := c.AcquireLease(ctx, "", "x", time.Second); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("bad lease: %v", err)
		}
	})
}

// Several coordinators racing for a free lease: exactly one wins.
func TestLeaderLeaseRace(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		var mu sync.Mutex
		winners := 0
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				_, ok, err := db.Cluster().AcquireLease(ctx, "leader", "coord-"+string(rune('a'+i)), time.Minute)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					winners++
					mu.Unlock()
				}
			}(i)
		}
		wg.Wait()
		if winners != 1 {
			t.Fatalf("%d winners", winners)
		}
	})
}

// A cron fire is claimed in the transaction that creates its run: a fire
// time is claimed once, only if later than the last, and a rolled-back
// creation leaves the fire unclaimed.
func TestCronFireWithRun(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		const key = "acme/app/nightly\n0 3 * * *\nUTC"
		at := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
		fire := func(at time.Time, fail bool) (bool, error) {
			var fired bool
			err := db.Update(ctx, func(tx *store.Tx) error {
				ok, err := tx.Cluster().ClaimCronFire(ctx, key, at)
				if err != nil || !ok {
					fired = false
					return err
				}
				if _, err := tx.Runs().Create(ctx, newRun(job("nightly"))); err != nil {
					return err
				}
				if fail {
					return errors.New("boom")
				}
				fired = true
				return nil
			})
			return fired, err
		}
		if ok, err := fire(at, true); ok || err == nil {
			t.Fatalf("failing fire: %v %v", ok, err)
		}
		if last, _ := db.Cluster().LastCronFire(ctx, key); !last.IsZero() {
			t.Fatalf("a rolled-back fire was kept: %v", last)
		}
		if ok, err := fire(at, false); !ok || err != nil {
			t.Fatalf("fire: %v %v", ok, err)
		}
		if ok, _ := fire(at, false); ok {
			t.Fatal("the same fire time was claimed twice")
		}
		if ok, _ := fire(at.Add(-time.Hour), false); ok {
			t.Fatal("an earlier fire time was claimed")
		}
		if ok, _ := fire(at.Add(24*time.Hour), false); !ok {
			t.Fatal("the next fire was refused")
		}
		runs, _ := db.Runs().List(ctx, store.RunFilter{})
		if len(runs) != 2 {
			t.Fatalf("%d runs, want 2", len(runs))
		}
		if last, _ := db.Cluster().LastCronFire(ctx, key); !last.Equal(at.Add(24 * time.Hour)) {
			t.Fatalf("last fire %v", last)
		}
	})
}

// Many coordinators evaluating the same schedule fire it once.
// Proves B7 (docs/behaviours.md).
func TestCronFireRace(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		at := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
		var wg sync.WaitGroup
		var mu sync.Mutex
		fired := 0
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ok, err := db.Cluster().ClaimCronFire(context.Background(), "k", at)
				if err != nil {
					t.Error(err)
				}
				if ok {
					mu.Lock()
					fired++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if fired != 1 {
			t.Fatalf("fired %d times", fired)
		}
	})
}
