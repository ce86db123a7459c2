package caches_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/caches"
	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

type fixture struct {
	db    *store.DB
	be    *fs.Backend
	s     *caches.Service
	clock *storetest.Clock
}

func newFixture(t *testing.T, maxBytes int64) *fixture {
	t.Helper()
	clock := storetest.NewClock()
	return fixtureOn(t, storetest.New(t, storetest.WithClock(clock.Now)), clock, maxBytes)
}

// forEachDB runs fn on a fixture over each database.
func forEachDB(t *testing.T, maxBytes int64, fn func(t *testing.T, f *fixture)) {
	clock := storetest.NewClock()
	storetest.ForEach(t, func(t *testing.T, db *store.DB) { fn(t, fixtureOn(t, db, clock, maxBytes)) }, storetest.WithClock(clock.Now))
}

func fixtureOn(t *testing.T, db *store.DB, clock *storetest.Clock, maxBytes int64) *fixture {
	t.Helper()
	be, err := fs.Open(fs.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := caches.New(db, be, caches.Config{MaxBytes: maxBytes, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{db: db, be: be, s: s, clock: clock}
}

// job creates a run of repository acme/app for ev and returns its job's id.
func (f *fixture) job(t testing.TB, ev kiln.Event) string {
	t.Helper()
	ev.Repository = "acme/app"
	if ev.DefaultBranch == "" {
		ev.DefaultBranch = "main"
	}
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	run, err := f.db.Runs().Create(context.Background(), store.NewRun{Source: "gh", Repository: "acme/app", Workflow: "ci",
		Event: raw, Jobs: []store.NewJob{{Name: "build", Steps: []string{"s"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return run.Jobs["build"]
}

func push(branch string) kiln.Event {
	return kiln.Event{Name: kiln.EventPush, Branch: branch, Ref: "refs/heads/" + branch}
}

func pr(n int, base string) kiln.Event {
	return kiln.Event{Name: kiln.EventPullRequest, Branch: "feature", BaseBranch: base, PR: &kiln.PR{Number: n}}
}

func (f *fixture) save(t *testing.T, jobID, key, body string) error {
	t.Helper()
	f.clock.Advance(time.Second) // saves are ordered in time
	_, err := f.s.Save(context.Background(), jobID, key, strings.NewReader(body))
	return err
}

// restore returns the restored body and hit, or "" when nothing matched.
func (f *fixture) restore(t *testing.T, jobID, key string, restoreKeys ...string) (string, caches.Hit) {
	t.Helper()
	body, hit, ok, err := f.s.Restore(context.Background(), jobID, key, restoreKeys)
	if err != nil {
		t.Fatalf("restore %q: %v", key, err)
	}
	if !ok {
		return "", hit
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), hit
}

// B212: a restore looks in the job's own scope, then its pull request's
// base branch, then the default branch; in each, the key exactly first,
// then each restore key as a prefix (the most recently saved match).
func TestRestoreByKeyThenPrefixAcrossScopes(t *testing.T) {
	forEachDB(t, 0, testRestoreOrder)
}

func testRestoreOrder(t *testing.T, f *fixture) {
	mainJob := f.job(t, push("main"))
	for key, body := range map[string]string{"go-old": "main old", "go-abc": "main abc"} {
		if err := f.save(t, mainJob, key, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.save(t, mainJob, "go-new", "main new"); err != nil {
		t.Fatal(err)
	}
	relJob := f.job(t, push("release"))
	if err := f.save(t, relJob, "go-rel", "release"); err != nil {
		t.Fatal(err)
	}

	// The default branch's job: the key exactly, or the newest by prefix.
	if body, hit := f.restore(t, mainJob, "go-abc", "go-"); body != "main abc" || !hit.Exact || hit.Scope != "refs/heads/main" {
		t.Fatalf("exact: %q %+v", body, hit)
	}
	if body, hit := f.restore(t, mainJob, "go-zzz", "nope-", "go-"); body != "main new" || hit.Exact || hit.Key != "go-new" {
		t.Fatalf("prefix: %q %+v", body, hit)
	}
	// A pull request into release: nothing of its own, so its base's.
	prJob := f.job(t, pr(7, "release"))
	if body, hit := f.restore(t, prJob, "go-abc", "go-"); body != "release" || hit.Scope != "refs/heads/release" || hit.Exact {
		t.Fatalf("base before default: %q %+v", body, hit)
	}
	// Its own scope first once it saved: the exact key from the default
	// branch loses to a prefix match in its own scope.
	if err := f.save(t, prJob, "go-pr", "pr"); err != nil {
		t.Fatal(err)
	}
	if body, hit := f.restore(t, prJob, "go-abc", "go-"); body != "pr" || hit.Scope != "refs/pull/7" {
		t.Fatalf("own scope first: %q %+v", body, hit)
	}
	// Then the default branch, when neither own nor base scope matches.
	if body, hit := f.restore(t, prJob, "go-abc"); body != "main abc" || hit.Scope != "refs/heads/main" || !hit.Exact {
		t.Fatalf("default branch last: %q %+v", body, hit)
	}
	// Nothing: the scopes searched, in order.
	body, hit := f.restore(t, prJob, "rust-1", "rust-")
	if body != "" || strings.Join(hit.Searched, " ") != "refs/pull/7 refs/heads/release refs/heads/main" {
		t.Fatalf("a miss: %q %+v", body, hit)
	}
	// Another branch's caches are never seen.
	if body, _ := f.restore(t, f.job(t, push("dev")), "go-rel"); body != "" {
		t.Fatalf("another branch's cache was restored: %q", body)
	}
	// A prefix is a prefix, not a pattern, and case matters.
	if body, _ := f.restore(t, mainJob, "x", "GO-", "go_", "%"); body != "" {
		t.Fatalf("a prefix matched as a pattern: %q", body)
	}
}

// B213: a cache key is saved once (the first save wins, a later save of
// it is a conflict that leaves the first body), only to the job's own
// scope, and never from a fork pull request's job.
func TestSavesAreImmutableScopedAndNeverFromForks(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	a := f.job(t, push("main"))
	if err := f.save(t, a, "k", "first"); err != nil {
		t.Fatal(err)
	}
	err := f.save(t, f.job(t, push("main")), "k", "second")
	if kiln.ErrorCode(err) != kiln.CodeConflict || !strings.Contains(kiln.ErrorMessage(err), "never overwritten") {
		t.Fatalf("a second save of the key: %v", err)
	}
	if body, _ := f.restore(t, a, "k"); body != "first" {
		t.Fatalf("after a second save: %q", body)
	}
	// One object in the bucket: the loser's body was not kept.
	if objs, _, _ := f.be.List(ctx, caches.Prefix, "", 10); len(objs) != 1 {
		t.Fatalf("objects: %+v", objs)
	}
	// The same key on another branch is another cache.
	dev := f.job(t, push("dev"))
	if err := f.save(t, dev, "k", "dev"); err != nil {
		t.Fatal(err)
	}
	if body, hit := f.restore(t, dev, "k"); body != "dev" || hit.Scope != "refs/heads/dev" {
		t.Fatalf("dev's own: %q %+v", body, hit)
	}
	fork := pr(9, "main")
	fork.Fork = &kiln.Fork{HeadRepository: "mallory/app", Author: "mallory"}
	forkJob := f.job(t, fork)
	err = f.save(t, forkJob, "k2", "planted")
	if kiln.ErrorCode(err) != kiln.CodeForbidden || !strings.Contains(kiln.ErrorMessage(err), "fork") {
		t.Fatalf("a fork's save: %v", err)
	}
	// A fork's job restores what its base saved.
	if body, _ := f.restore(t, forkJob, "k"); body != "first" {
		t.Fatalf("a fork's restore: %q", body)
	}
	for _, bad := range []string{"", strings.Repeat("k", caches.MaxKeyBytes+1), "a\nb"} {
		if err := f.save(t, a, bad, "x"); kiln.ErrorCode(err) != kiln.CodeInvalid {
			t.Errorf("key %q: %v", bad, err)
		}
	}
}

// B214: one cache over caches.max_bytes is refused and nothing of it is
// kept; saved caches past it in all evict the repository's least recently
// used (restoring one counts as using it).
func TestMaxBytesRefusesAndEvictsLeastRecentlyUsed(t *testing.T) {
	forEachDB(t, 10, testMaxBytes)
}

func testMaxBytes(t *testing.T, f *fixture) {
	ctx := context.Background()
	j := f.job(t, push("main"))
	err := f.save(t, j, "big", strings.Repeat("x", 11))
	if kiln.ErrorCode(err) != kiln.CodeTooLarge || !strings.Contains(kiln.ErrorMessage(err), "caches.max_bytes (10 bytes)") {
		t.Fatalf("over the cap: %v", err)
	}
	if objs, _, _ := f.be.List(ctx, caches.Prefix, "", 10); len(objs) != 0 {
		t.Fatalf("the refused cache's body was kept: %+v", objs)
	}
	for _, k := range []string{"a", "b"} {
		if err := f.save(t, j, k, "12345"); err != nil {
			t.Fatal(err)
		}
	}
	f.clock.Advance(time.Second)
	if body, _ := f.restore(t, j, "a"); body != "12345" { // a is now the more recently used
		t.Fatalf("a: %q", body)
	}
	if err := f.save(t, j, "c", "123"); err != nil {
		t.Fatal(err)
	}
	if body, _ := f.restore(t, j, "b"); body != "" {
		t.Fatalf("b, the least recently used, was kept: %q", body)
	}
	for _, k := range []string{"a", "c"} {
		if body, _ := f.restore(t, j, k); body == "" {
			t.Fatalf("%s was evicted", k)
		}
	}
	if objs, _, _ := f.be.List(ctx, caches.Prefix, "", 10); len(objs) != 2 {
		t.Fatalf("objects after the eviction: %+v", objs)
	}
}

// B215: a restore records the access (the TTL runs from it) in the
// database and in the object's last-accessed-at, keeping its created-at; a
// cache whose body is gone is forgotten and the restore looks on.
func TestRestoreTouchesAndForgetsLostBodies(t *testing.T) {
	f := newFixture(t, 0)
	ctx := context.Background()
	j := f.job(t, push("main"))
	if err := f.save(t, j, "k-1", "one"); err != nil {
		t.Fatal(err)
	}
	if err := f.save(t, j, "k-2", "two"); err != nil {
		t.Fatal(err)
	}
	before, _, _ := f.db.Caches().Exact(ctx, "gh:acme/app", "refs/heads/main", "k-1")
	f.clock.Advance(time.Hour)
	if body, _ := f.restore(t, j, "k-1"); body != "one" {
		t.Fatal(body)
	}
	after, _, _ := f.db.Caches().Exact(ctx, "gh:acme/app", "refs/heads/main", "k-1")
	if !after.AccessedAt.Equal(f.clock.Now().Truncate(time.Millisecond)) || !after.CreatedAt.Equal(before.CreatedAt) {
		t.Fatalf("row before %+v after %+v", before, after)
	}
	obj, err := f.be.Head(ctx, after.StorageKey)
	if err != nil {
		t.Fatal(err)
	}
	if at, _ := storage.ParseTime(obj.Meta[storage.MetaLastAccessedAt]); !at.Equal(f.clock.Now()) || obj.Meta[storage.MetaCreatedAt] == obj.Meta[storage.MetaLastAccessedAt] {
		t.Fatalf("object meta after the restore: %v", obj.Meta)
	}
	// k-2's body disappears: a prefix restore forgets it and finds k-1.
	k2, _, _ := f.db.Caches().Exact(ctx, "gh:acme/app", "refs/heads/main", "k-2")
	if err := f.be.Delete(ctx, k2.StorageKey); err != nil {
		t.Fatal(err)
	}
	if body, hit := f.restore(t, j, "k-3", "k-"); body != "one" || hit.Key != "k-1" {
		t.Fatalf("after k-2's body went: %q %+v", body, hit)
	}
	if _, ok, _ := f.db.Caches().Exact(ctx, "gh:acme/app", "refs/heads/main", "k-2"); ok {
		t.Fatal("k-2's row is still there")
	}
	if _, err := f.s.Save(ctx, "no-such-job", "k", strings.NewReader("x")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a save for an unknown job: %v", err)
	}
}
