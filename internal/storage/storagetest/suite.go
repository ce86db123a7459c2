// Package storagetest holds what tests of storage backends share: the
// conformance suite that every backend must pass (Run) and a real
// S3-compatible server to run the S3 backend against (StartVersitygw).
package storagetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/storage"
)

// NewBackend returns an empty backend for one test.
type NewBackend func(t *testing.T) storage.Backend

// Limits names what the store behind a backend cannot promise; the suite
// skips, loudly, the checks that need it.
type Limits struct {
	// NonAtomicSelfCopy: the store checks a conditional copy's ETag and
	// writes the new metadata afterwards, by path, so a put landing in
	// that instant gets the touch's metadata (versitygw 1.8.0's POSIX
	// backend does this). The suite then checks only bodies when touches
	// race puts; a put that lands between a touch's read and its copy is
	// still caught, and still checked.
	NonAtomicSelfCopy bool
}

// Run runs the conformance suite: every behaviour storage.Backend
// documents, on backends newBackend makes (a fresh one per subtest).
func Run(t *testing.T, newBackend NewBackend) { RunWith(t, newBackend, Limits{}) }

// RunWith is Run on a store with limits.
func RunWith(t *testing.T, newBackend NewBackend, limits Limits) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, storage.Backend)
	}{
		{"PutGetHead", testPutGetHead},
		{"Overwrite", testOverwrite},
		{"MetaRoundTrip", testMetaRoundTrip},
		{"Missing", testMissing},
		{"InvalidInput", testInvalidInput},
		{"SharedPrefixes", testSharedPrefixes},
		{"EveryKeyCharacter", testEveryKeyCharacter},
		{"List", testList},
		{"ListPages", testListPages},
		{"Delete", testDelete},
		{"FailedPutLeavesOldObject", testFailedPut},
		{"LargeStreamed", testLargeStreamed},
		{"ConcurrentPuts", testConcurrentPuts},
		{"UpdateMeta", testUpdateMeta},
		{"TouchUnchanged", testTouchUnchanged},
		{"TouchAfterPut", testTouchAfterPut},
		{"TouchRacingPuts", func(t *testing.T, b storage.Backend) { testTouchRacingPuts(t, b, limits.NonAtomicSelfCopy) }},
		{"Presign", testPresign},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, newBackend(t)) })
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// put stores body under key or fails t.
func put(t *testing.T, b storage.Backend, key, body string, meta storage.Meta) storage.Object {
	t.Helper()
	obj, err := b.Put(ctx(t), key, strings.NewReader(body), meta)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return obj
}

// get reads key whole or fails t.
func get(t *testing.T, b storage.Backend, key string) (string, storage.Object) {
	t.Helper()
	r, obj, err := b.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("get %s: read: %v", key, err)
	}
	return string(data), obj
}

func head(t *testing.T, b storage.Backend, key string) storage.Object {
	t.Helper()
	obj, err := b.Head(ctx(t), key)
	if err != nil {
		t.Fatalf("head %s: %v", key, err)
	}
	return obj
}

func sameMeta(a, b storage.Meta) bool { return maps.Equal(a, b) || len(a) == 0 && len(b) == 0 }

func testPutGetHead(t *testing.T, b storage.Backend) {
	before := time.Now().Add(-time.Minute)
	meta := storage.Meta{"owner": "run-12", "kind": "log"}
	obj := put(t, b, "runs/12/log.txt", "hello, storage", meta)
	if obj.Key != "runs/12/log.txt" || obj.Size != 14 || obj.ETag == "" {
		t.Fatalf("put returned %+v", obj)
	}
	h := head(t, b, "runs/12/log.txt")
	if h.Size != 14 || h.ETag != obj.ETag || !sameMeta(h.Meta, meta) || h.Modified.Before(before) {
		t.Fatalf("head %+v after put %+v", h, obj)
	}
	body, g := get(t, b, "runs/12/log.txt")
	if body != "hello, storage" || g.ETag != obj.ETag || g.Size != 14 || !sameMeta(g.Meta, meta) {
		t.Fatalf("get %q %+v", body, g)
	}
	empty := put(t, b, "runs/12/empty", "", nil)
	if body, g := get(t, b, "runs/12/empty"); body != "" || g.Size != 0 || empty.Size != 0 || len(g.Meta) != 0 {
		t.Fatalf("empty object: %q %+v", body, g)
	}
}

func testOverwrite(t *testing.T, b storage.Backend) {
	first := put(t, b, "k", "first body", storage.Meta{"a": "1", "b": "2"})
	second := put(t, b, "k", "the second body", storage.Meta{"a": "3"})
	if second.ETag == first.ETag {
		t.Fatalf("a different body kept the ETag %q", first.ETag)
	}
	body, obj := get(t, b, "k")
	if body != "the second body" || obj.ETag != second.ETag || !sameMeta(obj.Meta, storage.Meta{"a": "3"}) {
		t.Fatalf("after overwrite: %q %+v", body, obj)
	}
}

func testMetaRoundTrip(t *testing.T, b storage.Backend) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 891011121, time.UTC)
	meta := storage.Fresh(storage.Meta{"sha256": strings.Repeat("ab", 32), "x-1": "a value, with (punctuation) & = sign", "n": "0"}, now)
	put(t, b, "m", "x", meta)
	got := head(t, b, "m").Meta
	if !sameMeta(got, meta) {
		t.Fatalf("metadata %v came back as %v", meta, got)
	}
	if at, err := storage.ParseTime(got[storage.MetaCreatedAt]); err != nil || !at.Equal(now) {
		t.Fatalf("created-at %q: %v", got[storage.MetaCreatedAt], err)
	}
	got["n"] = "changed" // the caller's copy, not the backend's
	if head(t, b, "m").Meta["n"] != "0" {
		t.Fatal("changing a returned Meta changed the stored one")
	}
}

func testMissing(t *testing.T, b storage.Backend) {
	c := ctx(t)
	if _, err := b.Head(c, "no/such"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("head: %v", err)
	}
	if r, _, err := b.Get(c, "no/such"); !errors.Is(err, storage.ErrNotFound) {
		if r != nil {
			r.Close()
		}
		t.Errorf("get: %v", err)
	}
	if ok, err := b.UpdateMeta(c, "no/such", storage.Meta{"a": "b"}, ""); ok || err != nil {
		t.Errorf("update meta: %v %v", ok, err)
	}
	if ok, err := storage.Touch(c, b, "no/such", time.Now()); ok || err != nil {
		t.Errorf("touch: %v %v", ok, err)
	}
	if err := b.Delete(c, "no/such"); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := b.Head(c, "no/such"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a missing object exists after UpdateMeta: %v", err)
	}
}

func testInvalidInput(t *testing.T, b storage.Backend) {
	c := ctx(t)
	for _, key := range []string{"", "/a", "a/", "a//b", "../x", "a/./b", "a/../b", "a b", "a\x00", "a#b", `a\b`, "é", strings.Repeat("k", 1025)} {
		if _, err := b.Put(c, key, strings.NewReader("x"), nil); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("put %q: %v", key, err)
		}
		if _, err := b.Head(c, key); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("head %q: %v", key, err)
		}
		if _, _, err := b.Get(c, key); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("get %q: %v", key, err)
		}
		if err := b.Delete(c, key); !errors.Is(err, storage.ErrInvalidKey) {
			t.Errorf("delete %q: %v", key, err)
		}
	}
	for _, meta := range []storage.Meta{{"Upper": "x"}, {"-a": "x"}, {"a_b": "x"}, {"a": "line\nbreak"}, {"a": " padded"},
		{"a": "é"}, {"a": strings.Repeat("v", storage.MaxMetaBytes)}} {
		if _, err := b.Put(c, "k", strings.NewReader("x"), meta); !errors.Is(err, storage.ErrInvalidMeta) {
			t.Errorf("put with meta %q: %v", meta, err)
		}
	}
	if _, err := b.Head(c, "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a refused put stored something: %v", err)
	}
}

// Keys that share prefixes coexist. (Keys never nest — see
// storage.Backend — so "a" and "a/b" are not both tried.)
func testSharedPrefixes(t *testing.T, b storage.Backend) {
	keys := []string{"a", "a-b", "a.b", "ab/c", "ab/c-d", "ab/cd/e", "A"}
	for _, k := range keys {
		put(t, b, k, "body of "+k, storage.Meta{"key": strings.ReplaceAll(k, "/", "-")})
	}
	for _, k := range keys {
		if body, obj := get(t, b, k); body != "body of "+k || obj.Meta["key"] != strings.ReplaceAll(k, "/", "-") {
			t.Errorf("%s: %q %v", k, body, obj.Meta)
		}
	}
	if err := b.Delete(ctx(t), "ab/c"); err != nil {
		t.Fatal(err)
	}
	if body, _ := get(t, b, "ab/cd/e"); body != "body of ab/cd/e" {
		t.Errorf("deleting ab/c changed ab/cd/e: %q", body)
	}
}

// Every character a key may hold survives a round trip, a listing, a
// touch and a presigned URL.
func testEveryKeyCharacter(t *testing.T, b storage.Backend) {
	var odd strings.Builder
	for c := byte(0x21); c <= 0x7e; c++ {
		if c != '/' && c != '\\' && c != '#' {
			odd.WriteByte(c)
		}
	}
	key := "odd/" + odd.String() + "/x"
	put(t, b, key, "odd", storage.Meta{"n": "1"})
	if body, obj := get(t, b, key); body != "odd" || obj.Key != key {
		t.Fatalf("get %q: %q %+v", key, body, obj)
	}
	if objs, _, err := b.List(ctx(t), "odd/", "", 10); err != nil || !slices.Equal(keysOf(objs), []string{key}) {
		t.Fatalf("list: %q %v", keysOf(objs), err)
	}
	if ok, err := storage.Touch(ctx(t), b, key, time.Now()); !ok || err != nil {
		t.Fatalf("touch: %v %v", ok, err)
	}
	if url, err := b.PresignGet(ctx(t), key, time.Minute); err == nil {
		client := &http.Client{Transport: &http.Transport{}}
		defer client.CloseIdleConnections()
		resp, err := client.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(data) != "odd" {
			t.Fatalf("presigned GET of %q: %d %q", key, resp.StatusCode, data)
		}
	}
	if err := b.Delete(ctx(t), key); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx(t), key); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

func keysOf(objs []storage.Object) []string {
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.Key
	}
	return out
}

func testList(t *testing.T, b storage.Backend) {
	keys := []string{"logs/r1/j1", "logs/r1/j2", "logs/r10/j1", "logs/r1-x", "logs/r2/j1/s1", "logs/r2/j1/s2", "other/x", "logs0"}
	objs := map[string]storage.Object{}
	for i, k := range keys {
		objs[k] = put(t, b, k, strings.Repeat("x", i), nil)
	}
	for _, c := range []struct {
		prefix, after string
		want          []string
	}{
		{"logs/", "", []string{"logs/r1-x", "logs/r1/j1", "logs/r1/j2", "logs/r10/j1", "logs/r2/j1/s1", "logs/r2/j1/s2"}},
		{"logs/r1", "", []string{"logs/r1-x", "logs/r1/j1", "logs/r1/j2", "logs/r10/j1"}},
		{"logs/r1/", "", []string{"logs/r1/j1", "logs/r1/j2"}},
		{"logs/r1/j", "logs/r1/j1", []string{"logs/r1/j2"}},
		{"logs/", "logs/r1/j2", []string{"logs/r10/j1", "logs/r2/j1/s1", "logs/r2/j1/s2"}},
		{"logs/", "logs/r2", []string{"logs/r2/j1/s1", "logs/r2/j1/s2"}},
		{"logs/", "logs/r2/j1/s2", nil},
		{"logs", "", []string{"logs/r1-x", "logs/r1/j1", "logs/r1/j2", "logs/r10/j1", "logs/r2/j1/s1", "logs/r2/j1/s2", "logs0"}},
		{"", "", []string{"logs/r1-x", "logs/r1/j1", "logs/r1/j2", "logs/r10/j1", "logs/r2/j1/s1", "logs/r2/j1/s2", "logs0", "other/x"}},
		{"nothing/", "", nil},
		{"logs/r3", "", nil},
	} {
		got, more, err := b.List(ctx(t), c.prefix, c.after, 100)
		if err != nil {
			t.Fatalf("list %q after %q: %v", c.prefix, c.after, err)
		}
		if more || !slices.Equal(keysOf(got), c.want) {
			t.Errorf("list %q after %q: %q (more %v), want %q", c.prefix, c.after, keysOf(got), more, c.want)
		}
		for _, o := range got {
			if want := objs[o.Key]; o.Size != want.Size || o.ETag != want.ETag {
				t.Errorf("listed %+v, put %+v", o, want)
			}
		}
	}
}

func testListPages(t *testing.T, b storage.Backend) {
	var want []string
	for i := range 23 {
		k := fmt.Sprintf("p/%c/%02d", 'a'+i%3, i)
		put(t, b, k, "x", nil)
		want = append(want, k)
	}
	slices.Sort(want)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatalf("more than 10 pages of 5 for 23 keys: %q", got)
		}
		objs, more, err := b.List(ctx(t), "p/", after, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(objs) > 5 || more && len(objs) == 0 {
			t.Fatalf("page of %d, more %v", len(objs), more)
		}
		got = append(got, keysOf(objs)...)
		if !more {
			break
		}
		after = objs[len(objs)-1].Key
	}
	if !slices.Equal(got, want) {
		t.Fatalf("paged through %q, want %q", got, want)
	}
}

func testDelete(t *testing.T, b storage.Backend) {
	put(t, b, "d/one", "1", nil)
	put(t, b, "d/two", "2", nil)
	if err := b.Delete(ctx(t), "d/one"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx(t), "d/one"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("head after delete: %v", err)
	}
	if objs, _, _ := b.List(ctx(t), "d/", "", 10); !slices.Equal(keysOf(objs), []string{"d/two"}) {
		t.Fatalf("listed after delete: %q", keysOf(objs))
	}
	if err := b.Delete(ctx(t), "d/two"); err != nil {
		t.Fatal(err)
	}
	put(t, b, "d/two", "again", nil)
	if body, _ := get(t, b, "d/two"); body != "again" {
		t.Fatalf("put after delete: %q", body)
	}
}

// failingReader yields n bytes, then an error.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errors.New("the uploader went away")
	}
	k := min(len(p), r.n)
	r.n -= k
	return k, nil
}

// A put whose body fails or whose context ends stores nothing: the old
// object stays whole.
func testFailedPut(t *testing.T, b storage.Backend) {
	old := put(t, b, "f", "old body", storage.Meta{"v": "old"})
	if _, err := b.Put(ctx(t), "f", &failingReader{n: 100 << 10}, storage.Meta{"v": "new"}); err == nil {
		t.Fatal("a put whose body failed succeeded")
	}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Put(cancelled, "f", strings.NewReader("new body"), storage.Meta{"v": "new"}); err == nil {
		t.Fatal("a put with an ended context succeeded")
	}
	if _, err := b.Put(cancelled, "g", strings.NewReader("new body"), nil); err == nil {
		t.Fatal("a put with an ended context succeeded")
	}
	body, obj := get(t, b, "f")
	if body != "old body" || obj.ETag != old.ETag || obj.Meta["v"] != "old" {
		t.Fatalf("after failed puts: %q %+v", body, obj)
	}
	if _, err := b.Head(ctx(t), "g"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a cancelled put left an object: %v", err)
	}
}

func testUpdateMeta(t *testing.T, b storage.Backend) {
	obj := put(t, b, "u", "body", storage.Meta{"a": "1"})
	if ok, err := b.UpdateMeta(ctx(t), "u", storage.Meta{"a": "2", "b": "x"}, obj.ETag); !ok || err != nil {
		t.Fatalf("update with the current ETag: %v %v", ok, err)
	}
	if body, got := get(t, b, "u"); body != "body" || !sameMeta(got.Meta, storage.Meta{"a": "2", "b": "x"}) {
		t.Fatalf("after update: %q %v", body, got.Meta)
	}
	cur := head(t, b, "u")
	if ok, err := b.UpdateMeta(ctx(t), "u", storage.Meta{"a": "3"}, "not-the-etag"); ok || err != nil {
		t.Fatalf("update with a wrong ETag: %v %v", ok, err)
	}
	if got := head(t, b, "u"); !sameMeta(got.Meta, cur.Meta) {
		t.Fatalf("a refused update changed the metadata to %v", got.Meta)
	}
	// Unconditional, as after a presigned upload.
	if ok, err := b.UpdateMeta(ctx(t), "u", storage.Meta{"a": "4"}, ""); !ok || err != nil {
		t.Fatalf("unconditional update: %v %v", ok, err)
	}
	if body, got := get(t, b, "u"); body != "body" || !sameMeta(got.Meta, storage.Meta{"a": "4"}) {
		t.Fatalf("after unconditional update: %q %v", body, got.Meta)
	}
	if _, err := b.UpdateMeta(ctx(t), "u", storage.Meta{"A": "x"}, ""); !errors.Is(err, storage.ErrInvalidMeta) {
		t.Fatalf("update with invalid meta: %v", err)
	}
}
