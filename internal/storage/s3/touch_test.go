package s3_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/storage/s3"
	"github.com/kilnci/kiln/internal/storage/storagetest"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Hour)
	t2 = t0.Add(2 * time.Hour)
)

// rig is a versitygw bucket reached directly and through a fault proxy.
type rig struct {
	bucket  string
	direct  *s3.Backend // straight to the server
	proxied *s3.Backend // through the proxy
	proxy   *faultProxy
	logs    *lockedBuffer // the proxied backend's log
}

func newRig(t *testing.T) *rig {
	srv := storagetest.StartVersitygw(t)
	r := &rig{bucket: srv.NewBucket(t), logs: &lockedBuffer{}}
	r.direct = newBackend(t, srv, r.bucket, srv.Endpoint)
	r.proxy = newFaultProxy(t, srv.Endpoint)
	r.proxied = newBackendWith(t, srv, r.bucket, r.proxy.URL, slog.New(slog.NewTextHandler(r.logs, nil)))
	return r
}

func (r *rig) put(t *testing.T, key, body string, meta storage.Meta) storage.Object {
	t.Helper()
	obj, err := r.direct.Put(context.Background(), key, strings.NewReader(body), meta)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// get reads key directly: what the store holds.
func (r *rig) get(t *testing.T, key string) (string, storage.Meta) {
	t.Helper()
	rc, obj, err := r.direct.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(data), obj.Meta
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func isConditionalCopy(r *http.Request) bool {
	return isCopy(r) && r.Header.Get("X-Amz-Copy-Source-If-Match") != ""
}

// Head returns an object's metadata and ETag, and a missing key however
// the store words it — NoSuchKey, NotFound, a bare 404 — is ErrNotFound;
// a missing bucket is not.
// Proves B88 (docs/behaviours.md).
func TestHeadReturnsMetadataAndETagOrNotFound(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	meta := storage.Fresh(storage.Meta{"v": "1"}, t0)
	put := r.put(t, "caches/k", "body", meta)
	h, err := r.proxied.Head(ctx, "caches/k")
	if err != nil || h.ETag != put.ETag || h.Size != 4 || !equalMeta(h.Meta, meta) {
		t.Fatalf("head: %+v %v, put %+v", h, err, put)
	}
	if _, err := r.proxied.Head(ctx, "caches/missing"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("head of a missing key on the real server: %v", err)
	}
	for _, code := range []string{"NoSuchKey", "NotFound", ""} {
		r.proxy.add(&rule{match: isHead, status: 404, code: code, times: 1})
		if _, err := r.proxied.Head(ctx, "caches/k"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("head answered 404 %q: %v", code, err)
		}
		r.proxy.add(&rule{match: isGet, status: 404, code: code, times: 1})
		if _, _, err := r.proxied.Get(ctx, "caches/k"); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("get answered 404 %q: %v", code, err)
		}
	}
	r.proxy.add(&rule{match: isGet, status: 404, code: "NoSuchBucket", times: 1})
	if _, _, err := r.proxied.Get(ctx, "caches/k"); err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Errorf("a missing bucket: %v, want an error other than ErrNotFound", err)
	}
}

// A touch copies the object onto itself with MetadataDirective=REPLACE,
// on the condition that both the source and the destination still have
// the ETag just read.
// Proves B89 (docs/behaviours.md).
func TestTouchIsAConditionalSelfCopy(t *testing.T) {
	r := newRig(t)
	key := "caches/main/go+mod=1"
	r.put(t, key, "tarball pointer", storage.Fresh(storage.Meta{"scope": "main"}, t0))
	h, err := r.direct.Head(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := storage.Touch(context.Background(), r.proxied, key, t1); !ok || err != nil {
		t.Fatalf("touch: %v %v", ok, err)
	}
	copies := r.proxy.requests(isCopy)
	if len(copies) != 1 {
		t.Fatalf("%d copy requests, want 1", len(copies))
	}
	c := copies[0]
	src, _ := url.PathUnescape(strings.TrimPrefix(c.Header.Get("X-Amz-Copy-Source"), "/"))
	for name, want := range map[string]string{
		"copy source":          r.bucket + "/" + key,
		"destination":          "/" + r.bucket + "/" + key,
		"metadata directive":   "REPLACE",
		"copy-source-if-match": h.ETag,
		"if-match":             h.ETag,
		"last-accessed-at":     storage.FormatTime(t1),
		"created-at":           storage.FormatTime(t0),
	} {
		got := map[string]string{
			"copy source": src, "destination": c.URL.Path,
			"metadata directive":   c.Header.Get("X-Amz-Metadata-Directive"),
			"copy-source-if-match": c.Header.Get("X-Amz-Copy-Source-If-Match"),
			"if-match":             c.Header.Get("If-Match"),
			"last-accessed-at":     c.Header.Get("X-Amz-Meta-Last-Accessed-At"),
			"created-at":           c.Header.Get("X-Amz-Meta-Created-At"),
		}[name]
		if got != want || want == "" {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	body, meta := r.get(t, key)
	if body != "tarball pointer" || meta[storage.MetaLastAccessedAt] != storage.FormatTime(t1) || meta["scope"] != "main" {
		t.Fatalf("after the touch: %q %v", body, meta)
	}
}

// A touch whose object was replaced after it read the ETag gets 412 from
// the store: false, no retry, and the newer object keeps its body and
// metadata.
// Proves B90, B94 (docs/behaviours.md).
func TestTouchOfAReplacedObjectGets412AndWritesNothing(t *testing.T) {
	r := newRig(t)
	r.put(t, "caches/ptr", "points at tarball 1", storage.Fresh(storage.Meta{"v": "1"}, t0))
	// The put lands between the touch's HEAD and its copy.
	r.proxy.add(&rule{match: isCopy, times: 1, before: func() {
		r.put(t, "caches/ptr", "points at tarball 2", storage.Fresh(storage.Meta{"v": "2"}, t1))
	}})
	if ok, err := storage.Touch(context.Background(), r.proxied, "caches/ptr", t2); ok || err != nil {
		t.Fatalf("touch across a put: %v %v, want false and no error", ok, err)
	}
	newer := storage.Fresh(storage.Meta{"v": "2"}, t1)
	if body, meta := r.get(t, "caches/ptr"); body != "points at tarball 2" || !equalMeta(meta, newer) {
		t.Fatalf("the touch reverted the newer object: %q %v", body, meta)
	}
	// The same when the 412 is all the store says.
	r.proxy.add(&rule{match: isCopy, status: 412, code: "PreconditionFailed", times: 1})
	if ok, err := storage.Touch(context.Background(), r.proxied, "caches/ptr", t2); ok || err != nil {
		t.Fatalf("touch answered 412: %v %v", ok, err)
	}
	if n := len(r.proxy.requests(isCopy)); n != 2 {
		t.Fatalf("%d copy requests for two touches: a 412 was retried", n)
	}
	if _, meta := r.get(t, "caches/ptr"); !equalMeta(meta, newer) {
		t.Fatalf("after a 412: %v", meta)
	}
}

// A 409 ConditionalRequestConflict (the object is being replaced right
// now) is "someone else won": false, no error, no retry.
// Proves B91 (docs/behaviours.md).
func TestTouchDuringAReplaceGets409AndReturnsFalse(t *testing.T) {
	r := newRig(t)
	meta := storage.Fresh(storage.Meta{"v": "1"}, t0)
	r.put(t, "caches/k", "body", meta)
	r.proxy.add(&rule{match: isCopy, status: 409, code: "ConditionalRequestConflict", times: 1})
	if ok, err := storage.Touch(context.Background(), r.proxied, "caches/k", t1); ok || err != nil {
		t.Fatalf("touch answered 409: %v %v, want false and no error", ok, err)
	}
	if n := len(r.proxy.requests(isCopy)); n != 1 {
		t.Fatalf("%d copy requests: a 409 was retried", n)
	}
	if _, got := r.get(t, "caches/k"); !equalMeta(got, meta) {
		t.Fatalf("after a 409: %v", got)
	}
}

// A store that answers a conditional copy 501 gets the same copy again
// without the condition, at once, and never a conditional one again.
// Proves B92 (docs/behaviours.md).
func TestNotImplementedMakesCopiesUnconditionalForGood(t *testing.T) {
	r := newRig(t)
	r.put(t, "caches/k", "body", storage.Fresh(nil, t0))
	r.proxy.add(&rule{match: isConditionalCopy, status: 501, code: "NotImplemented"})
	for _, at := range []time.Time{t1, t2} {
		if ok, err := storage.Touch(context.Background(), r.proxied, "caches/k", at); !ok || err != nil {
			t.Fatalf("touch at %s: %v %v", at, ok, err)
		}
		if body, meta := r.get(t, "caches/k"); body != "body" || meta[storage.MetaLastAccessedAt] != storage.FormatTime(at) ||
			meta[storage.MetaCreatedAt] != storage.FormatTime(t0) {
			t.Fatalf("after the touch at %s: %q %v", at, body, meta)
		}
	}
	copies := r.proxy.requests(isCopy)
	if len(copies) != 3 {
		t.Fatalf("%d copy requests, want 3 (conditional, its unconditional retry, unconditional)", len(copies))
	}
	for i, c := range copies {
		conditional := c.Header.Get("X-Amz-Copy-Source-If-Match") != "" || c.Header.Get("If-Match") != ""
		if conditional != (i == 0) {
			t.Errorf("copy %d conditional: %v", i, conditional)
		}
	}
	if n := strings.Count(r.logs.String(), "cannot copy conditionally"); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, r.logs.String())
	}
}

func equalMeta(a, b storage.Meta) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
