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

func TestDeliveryDedup(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		d := store.NewDelivery{Source: "gh", DeliveryID: "d-1", Event: "push",
			Headers: map[string]string{"X-GitHub-Event": "push"}, Body: []byte(`{"ref":"refs/heads/main"}`)}
		id1, dup, err := db.Ingress().Record(ctx, d)
		if err != nil || dup {
			t.Fatalf("first: %v %v", dup, err)
		}
		id2, dup, err := db.Ingress().Record(ctx, d)
		if err != nil || !dup || id2 == id1 {
			t.Fatalf("second: %d %v %v", id2, dup, err)
		}
		// Another source may use the same id.
		other := d
		other.Source = "gitea"
		if _, dup, _ := db.Ingress().Record(ctx, other); dup {
			t.Fatal("a delivery id from another source was a duplicate")
		}
		// Without a delivery id nothing is deduplicated.
		anon := d
		anon.DeliveryID = ""
		for i := 0; i < 2; i++ {
			if _, dup, _ := db.Ingress().Record(ctx, anon); dup {
				t.Fatal("a delivery without id was a duplicate")
			}
		}
		got, err := db.Ingress().Get(ctx, id1)
		if err != nil || string(got.Body) != string(d.Body) || got.Headers["X-GitHub-Event"] != "push" || got.Status != kiln.DeliveryReceived {
			t.Fatalf("stored delivery %+v %v", got, err)
		}
		dupRow, _ := db.Ingress().Get(ctx, id2)
		if dupRow.Status != kiln.DeliveryDuplicate || dupRow.Body != nil || dupRow.ProcessedAt.IsZero() {
			t.Fatalf("duplicate row %+v", dupRow)
		}
		// After the TTL the id is new again; a purge drops expired dedup rows.
		clock.Advance(store.DefaultDedupTTL)
		if _, dup, _ := db.Ingress().Record(ctx, d); dup {
			t.Fatal("a delivery id past its TTL was a duplicate")
		}
		clock.Advance(store.DefaultDedupTTL)
		n, _, err := db.Ingress().Purge(ctx, time.Time{})
		if err != nil || n != 2 { // gh/d-1 (renewed once) and gitea/d-1
			t.Fatalf("purged %d dedup rows, %v", n, err)
		}
		if _, _, err := db.Ingress().Record(ctx, store.NewDelivery{}); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("a delivery without source: %v", err)
		}
	})
}

// Two coordinators receiving the same delivery at once record it once.
// Proves B2 (docs/behaviours.md).
func TestDeliveryDedupRace(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		var fresh atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, dup, err := db.Ingress().Record(ctx, store.NewDelivery{Source: "gh", DeliveryID: "same"})
				if err != nil {
					t.Error(err)
				}
				if !dup {
					fresh.Add(1)
				}
			}()
		}
		wg.Wait()
		if fresh.Load() != 1 {
			t.Fatalf("%d coordinators recorded the delivery as new", fresh.Load())
		}
	})
}

// A delivery answered 202 and then lost with its processor is claimed after
// the claim expires and processed exactly once: Finish commits with the
// runs it created, and a processor that lost its claim cannot finish.
// Proves B8, B134 (docs/behaviours.md).
func TestDeliveryProcessingExactlyOnce(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		id, _, err := db.Ingress().Record(ctx, store.NewDelivery{Source: "gh", DeliveryID: "d-1", Event: "push",
			Body: []byte("{}"), Owner: "coord-1", ClaimFor: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		// coord-1 holds it: nobody else can claim it yet.
		if ds, _ := db.Ingress().Claim(ctx, "coord-2", time.Minute, 10); len(ds) != 0 {
			t.Fatalf("claimed a held delivery: %+v", ds)
		}
		// coord-1 dies; after its claim expires coord-2 takes over: the
		// second attempt, coord-1's counted (B134).
		clock.Advance(time.Minute)
		ds, err := db.Ingress().Claim(ctx, "coord-2", time.Minute, 10)
		if err != nil || len(ds) != 1 || ds[0].ID != id || string(ds[0].Body) != "{}" || ds[0].Attempts != 2 {
			t.Fatalf("claim %+v %v", ds, err)
		}
		// coord-1 comes back and tries to finish: refused, and its run is
		// rolled back with it.
		err = db.Update(ctx, func(tx *store.Tx) error {
			cr, err := tx.Runs().Create(ctx, newRun(job("a")))
			if err != nil {
				return err
			}
			return tx.Ingress().Finish(ctx, id, "coord-1", kiln.DeliveryProcessed, "", []string{cr.ID})
		})
		if !errors.Is(err, store.ErrConflict) {
			t.Fatalf("finish by the old owner: %v", err)
		}
		if runs, _ := db.Runs().List(ctx, store.RunFilter{}); len(runs) != 0 {
			t.Fatalf("the rolled-back run exists: %+v", runs)
		}
		var runID string
		err = db.Update(ctx, func(tx *store.Tx) error {
			cr, err := tx.Runs().Create(ctx, newRun(job("a")))
			if err != nil {
				return err
			}
			runID = cr.ID
			return tx.Ingress().Finish(ctx, id, "coord-2", kiln.DeliveryProcessed, "1 workflow matched", []string{cr.ID})
		})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := db.Ingress().Get(ctx, id)
		if got.Status != kiln.DeliveryProcessed || len(got.RunIDs) != 1 || got.RunIDs[0] != runID || got.Message != "1 workflow matched" {
			t.Fatalf("finished delivery %+v", got)
		}
		mustRun(t, db, runID)
		clock.Advance(time.Hour)
		if ds, _ := db.Ingress().Claim(ctx, "coord-3", time.Minute, 10); len(ds) != 0 {
			t.Fatalf("a processed delivery was claimed again: %+v", ds)
		}
		if err := db.Ingress().Finish(ctx, id, "coord-2", kiln.DeliveryReceived, "", nil); !errors.Is(err, store.ErrInvalid) {
			t.Fatalf("finish as received: %v", err)
		}
	})
}

func TestEventLog(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		for i, src := range []string{"gh", "gh", "gitea", "gh"} {
			id, _, err := db.Ingress().Record(ctx, store.NewDelivery{Source: src, DeliveryID: string(rune('a' + i)), Owner: "c"})
			if err != nil {
				t.Fatal(err)
			}
			if i == 1 {
				if err := db.Ingress().Finish(ctx, id, "c", kiln.DeliveryNoMatch, "no workflow matched", nil); err != nil {
					t.Fatal(err)
				}
			}
			clock.Advance(time.Second)
		}
		all, err := db.Ingress().List(ctx, store.DeliveryFilter{})
		if err != nil || len(all) != 4 || all[0].DeliveryID != "d" || all[3].DeliveryID != "a" || all[0].Body != nil {
			t.Fatalf("list %+v %v", all, err)
		}
		gh, _ := db.Ingress().List(ctx, store.DeliveryFilter{Source: "gh", Before: all[0].ID})
		nm, _ := db.Ingress().List(ctx, store.DeliveryFilter{Status: kiln.DeliveryNoMatch})
		if len(gh) != 2 || len(nm) != 1 || nm[0].Message != "no workflow matched" {
			t.Fatalf("filters: %+v %+v", gh, nm)
		}
		_, events, err := db.Ingress().Purge(ctx, clock.Now().Add(-2*time.Second))
		if err != nil || events != 1 {
			t.Fatalf("purge events %d %v (only the processed old one goes)", events, err)
		}
		if _, err := db.Ingress().Get(ctx, 999); !errors.Is(err, store.ErrNotFound) || kiln.ErrorCode(err) != kiln.CodeNotFound {
			t.Fatalf("missing delivery: %v", err)
		}
	})
}

// The delivery id and the signed body's hash are checked in one statement:
// a body replayed under a new id is a duplicate, a repeated id is one, and
// a repeated id's (different) body is not remembered as received — it was
// never processed — so that body under a fresh id is new.
// Proves B253 (docs/behaviours.md).
func TestDeliveryDedupChecksIDAndBodyTogether(t *testing.T) {
	suite(t, func(t *testing.T, db *store.DB, clock *storetest.Clock) {
		rec := func(id, hash string) bool {
			t.Helper()
			_, dup, err := db.Ingress().Record(ctx, store.NewDelivery{Source: "gh", DeliveryID: id, BodyHash: hash, Event: "push", Body: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			return dup
		}
		if rec("d-1", "h-1") {
			t.Fatal("the first delivery was a duplicate")
		}
		if !rec("d-2", "h-1") {
			t.Fatal("a body replayed under a new id was not a duplicate")
		}
		if !rec("d-1", "h-2") {
			t.Fatal("a repeated id was not a duplicate")
		}
		if rec("d-3", "h-2") {
			t.Fatal("the body of a refused duplicate was remembered as received")
		}
		// Both keys expire with the TTL.
		clock.Advance(store.DefaultDedupTTL)
		if rec("d-1", "h-1") {
			t.Fatal("a delivery past its TTL was a duplicate")
		}
	})
}
