package store_test

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// Every write of a source is announced to the writing process's watchers
// before the write returns — a write inside a caller's transaction once
// that transaction ended, a rolled-back one too (it may have committed) —
// and on PostgreSQL to every listener of SourcesChannel on commit only.
// Proves B282 (docs/behaviours.md).
func TestSourceWritesAreAnnounced(t *testing.T) {
	storetest.ForEach(t, func(t *testing.T, db *store.DB) {
		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var heard, notified []string
		stop := db.WatchSources(func(id string) { mu.Lock(); heard = append(heard, id); mu.Unlock() })
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		if db.Dialect() == "postgres" {
			ready := make(chan struct{})
			wg.Go(func() {
				_ = db.Listen(ctx, store.SourcesChannel, func() { close(ready) }, func(id string) {
					mu.Lock()
					notified = append(notified, id)
					mu.Unlock()
				})
			})
			<-ready
		}
		took := func(what string, want []string) {
			t.Helper()
			mu.Lock()
			defer mu.Unlock()
			if !reflect.DeepEqual(heard, want) {
				t.Fatalf("%s: the watcher heard %q, want %q", what, heard, want)
			}
			heard = nil
		}

		src, err := db.Sources().Create(ctx, store.Source{Kind: kiln.SourceGeneric, Name: "g", Config: []byte(`{"a":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		took("create", []string{src.ID})
		src.Config = []byte(`{"a":2}`)
		if err := db.Sources().Update(ctx, src); err != nil {
			t.Fatal(err)
		}
		took("update", []string{src.ID})
		boom := errors.New("boom")
		err = db.Update(ctx, func(tx *store.Tx) error {
			if err := tx.Sources().Update(ctx, src); err != nil {
				return err
			}
			mu.Lock()
			defer mu.Unlock()
			if len(heard) != 0 {
				t.Error("the watcher heard of a write before its transaction ended")
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatal(err)
		}
		took("a rolled-back update in a transaction", []string{src.ID})
		if _, err := db.Sources().Get(ctx, "nope"); err == nil {
			t.Fatal("a source that does not exist")
		}
		took("a read", nil)
		if err := db.Sources().Delete(ctx, src.ID); err != nil {
			t.Fatal(err)
		}
		took("delete", []string{src.ID})
		stop()
		if _, err := db.Sources().Create(ctx, store.Source{Kind: kiln.SourceGeneric, Name: "h"}); err != nil {
			t.Fatal(err)
		}
		took("a write after stop", nil)

		if db.Dialect() == "postgres" {
			// Create, update, delete and the last create: not the rolled-back update.
			waittest.Until(t, 30*time.Second, "the four notifications", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(notified) >= 4
			})
			mu.Lock()
			defer mu.Unlock()
			if len(notified) != 4 || notified[0] != src.ID || notified[1] != src.ID || notified[2] != src.ID || notified[3] == src.ID {
				t.Fatalf("notified %q", notified)
			}
		}
	})
}
