package ingress

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
	"github.com/kilnci/kiln/internal/waittest"
)

// Two servers on one PostgreSQL database, each with its own store and
// Sources: a source written through one reaches the other's next use once
// the write's notification arrives, with neither waiting for its cache to
// age; a notification the other missed (its listener connection died
// without an error) leaves it stale for at most SourceTrust.
// Proves B282 (docs/behaviours.md).
func TestSourceWriteReachesTheOtherServerOnPostgres(t *testing.T) {
	url := storetest.PostgresURL(t)
	ctx, cancel := context.WithCancel(context.Background())
	// Both servers' clocks stand still unless the test moves them: only
	// notifications can refresh a cached source, until the TTL test.
	now := time.Now()
	clock := func() time.Time { return now }
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	server := func() (*store.DB, *Sources, context.CancelFunc) {
		db, err := store.Open(ctx, store.Config{URL: url, Releaser: storetest.QueueAsCreated})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		s := NewSources(db, forge.Options{})
		s.now = clock
		lctx, stop := context.WithCancel(ctx)
		wg.Go(func() { _ = s.Listen(lctx) })
		waittest.Until(t, 30*time.Second, "the source listener", s.listening.Load)
		return db, s, stop
	}
	dbA, a, _ := server()
	_, b, stopB := server()

	st, err := Encode(cloneSource("read-1"))
	if err != nil {
		t.Fatal(err)
	}
	created, err := dbA.Sources().Create(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	token := func(s *Sources) string {
		t.Helper()
		fs, _, err := s.Repo(ctx, created.ID)
		if err != nil {
			t.Fatal(err)
		}
		// The webhook's lookup by name follows the same cache.
		st, byName, err := s.ByName(ctx, "gh")
		if err != nil || byName == nil || st.ID != created.ID {
			t.Fatalf("ByName: %v, %v, %v", st.ID, byName, err)
		}
		if byName.GitHub.Clone.Token != fs.GitHub.Clone.Token {
			t.Fatalf("by name %q, by id %q", byName.GitHub.Clone.Token, fs.GitHub.Clone.Token)
		}
		return fs.GitHub.Clone.Token
	}
	update := func(tok string) {
		t.Helper()
		st, err := Encode(cloneSource(tok))
		if err != nil {
			t.Fatal(err)
		}
		st.ID = created.ID
		if err := dbA.Sources().Update(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if a, b := token(a), token(b); a != "read-1" || b != "read-1" {
		t.Fatalf("before any change: %q and %q", a, b)
	}

	update("read-2")
	if got := token(a); got != "read-2" {
		t.Fatalf("the writing server's next use saw %q", got)
	}
	waittest.Until(t, 30*time.Second, "the other server hearing of the update", func() bool { return token(b) == "read-2" })

	// b's listener is gone, but b believes it hears: a connection that
	// died silently. Only the TTL brings it the next update.
	stopB()
	waittest.Until(t, 30*time.Second, "b's listener to stop", func() bool { return !b.listening.Load() })
	b.listening.Store(true)
	if got := token(b); got != "read-2" {
		t.Fatalf("b before the missed update: %q", got)
	}
	update("read-3")
	if got := token(b); got != "read-2" {
		t.Fatalf("b saw %q without the notification and within the TTL: is it reading the row per use?", got)
	}
	now = now.Add(SourceTrust)
	if got := token(b); got != "read-3" {
		t.Fatalf("b still saw %q a SourceTrust after the missed update", got)
	}

	// A server whose listener is down trusts nothing: every use reads.
	b.listening.Store(false)
	update("read-4")
	if got := token(b); got != "read-4" {
		t.Fatalf("b, not listening, saw %q", got)
	}
	if err := dbA.Sources().Delete(ctx, created.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Repo(ctx, created.ID); kiln.ErrorCode(err) != kiln.CodeNotFound {
		t.Fatalf("the writing server's next use of a removed source: %v", err)
	}
	if _, fs, err := a.ByName(ctx, "gh"); err != nil || fs != nil {
		t.Fatalf("the writing server's lookup of a removed source by name: %v, %v", fs, err)
	}
}

// A renamed source is found under its new name only, at once on the
// server that renamed it (B282).
func TestSourceRenameReachesByName(t *testing.T) {
	db := storetest.New(t)
	s := NewSources(db, forge.Options{})
	st, err := Encode(cloneSource("tok"))
	if err != nil {
		t.Fatal(err)
	}
	created, err := db.Sources().Create(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	if got, fs, err := s.ByName(t.Context(), "gh"); err != nil || fs == nil || got.ID != created.ID {
		t.Fatalf("ByName(gh) = %v, %v, %v", got.ID, fs, err)
	}
	renamed := cloneSource("tok")
	renamed.Name = "gh2"
	if st, err = Encode(renamed); err != nil {
		t.Fatal(err)
	}
	st.ID = created.ID
	if err := db.Sources().Update(t.Context(), st); err != nil {
		t.Fatal(err)
	}
	if _, fs, err := s.ByName(t.Context(), "gh"); err != nil || fs != nil {
		t.Fatalf("the old name still answers: %v, %v", fs, err)
	}
	if got, fs, err := s.ByName(t.Context(), "gh2"); err != nil || fs == nil || got.ID != created.ID || fs.Name != "gh2" {
		t.Fatalf("ByName(gh2) = %v, %v, %v", got.ID, fs, err)
	}
}

func cloneSource(token string) *forge.Source {
	return &forge.Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &forge.GitHubConfig{
		APIBase: "https://ghe.example.test/api/v3", Token: "pat", WebhookSecret: "s", Clone: &forge.CloneConfig{Token: token}}}
}
