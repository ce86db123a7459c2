package storagetest

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/storage"
)

var (
	t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 = t0.Add(time.Hour)
	t2 = t0.Add(2 * time.Hour)
)

func metaTime(t *testing.T, m storage.Meta, key string) time.Time {
	t.Helper()
	at, err := storage.ParseTime(m[key])
	if err != nil {
		t.Fatalf("%s: %v (meta %v)", key, err, m)
	}
	return at
}

// A touch of an object nobody changed refreshes last-accessed-at and keeps
// created-at, the other metadata and the body (B93).
func testTouchUnchanged(t *testing.T, b storage.Backend) {
	put(t, b, "cache/k", "cached body", storage.Fresh(storage.Meta{"scope": "main"}, t0))
	for _, at := range []time.Time{t1, t2} {
		ok, err := storage.Touch(ctx(t), b, "cache/k", at)
		if !ok || err != nil {
			t.Fatalf("touch at %s: %v %v", at, ok, err)
		}
		body, obj := get(t, b, "cache/k")
		if body != "cached body" || obj.Meta["scope"] != "main" || len(obj.Meta) != 3 {
			t.Fatalf("after touch: %q %v", body, obj.Meta)
		}
		if c, l := metaTime(t, obj.Meta, storage.MetaCreatedAt), metaTime(t, obj.Meta, storage.MetaLastAccessedAt); !c.Equal(t0) || !l.Equal(at) {
			t.Fatalf("after touch at %s: created-at %s, last-accessed-at %s", at, c, l)
		}
	}
}

// A touch that read an object before a put replaced it writes nothing: the
// newer object keeps its body and metadata (B94).
func testTouchAfterPut(t *testing.T, b storage.Backend) {
	put(t, b, "cache/ptr", "points at tarball 1", storage.Fresh(storage.Meta{"v": "1"}, t0))
	stale, err := b.Head(ctx(t), "cache/ptr")
	if err != nil {
		t.Fatal(err)
	}
	put(t, b, "cache/ptr", "points at tarball 2", storage.Fresh(storage.Meta{"v": "2"}, t1))
	meta := stale.Meta.Clone()
	meta[storage.MetaLastAccessedAt] = storage.FormatTime(t2)
	ok, err := b.UpdateMeta(ctx(t), "cache/ptr", meta, stale.ETag)
	if ok || err != nil {
		t.Fatalf("a touch with the ETag read before a put: %v %v, want false and no error", ok, err)
	}
	body, obj := get(t, b, "cache/ptr")
	if body != "points at tarball 2" || obj.Meta["v"] != "2" || !metaTime(t, obj.Meta, storage.MetaLastAccessedAt).Equal(t1) ||
		!metaTime(t, obj.Meta, storage.MetaCreatedAt).Equal(t1) {
		t.Fatalf("the stale touch reverted the object: %q %v", body, obj.Meta)
	}
}

// Touches race a writer that keeps replacing the object: every read is
// one version with its own metadata, and the last put is what stays
// (B94). On a store whose self-copy is not atomic (bodiesOnly) a touch
// may still attach its metadata to a newer body, so only the bodies are
// checked: a touch never writes an older body back.
func testTouchRacingPuts(t *testing.T, b storage.Backend, bodiesOnly bool) {
	const versions = 25
	body := func(n int) string { return fmt.Sprintf("version %03d %s", n, strings.Repeat("x", n*97)) }
	put(t, b, "cache/hot", body(0), storage.Fresh(storage.Meta{"v": "0"}, time.Now()))
	errs := make(chan error, 8)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := storage.Touch(ctx(t), b, "cache/hot", time.Now()); err != nil {
					errs <- err
					return
				}
				r, obj, err := b.Get(ctx(t), "cache/hot")
				if err != nil {
					errs <- err
					return
				}
				data, _ := io.ReadAll(r)
				r.Close()
				n, _ := strconv.Atoi(obj.Meta["v"])
				if bodiesOnly && len(data) >= 11 {
					n, _ = strconv.Atoi(string(data[8:11]))
				}
				if string(data) != body(n) {
					errs <- fmt.Errorf("read %.11q… with the metadata of version %d", data, n)
					return
				}
			}
		})
	}
	for n := 1; n <= versions; n++ {
		put(t, b, "cache/hot", body(n), storage.Fresh(storage.Meta{"v": strconv.Itoa(n)}, time.Now()))
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, obj := get(t, b, "cache/hot")
	if got != body(versions) || obj.Meta["v"] != strconv.Itoa(versions) && !bodiesOnly {
		t.Fatalf("after the last put: %.11q… with metadata %v, want version %d", got, obj.Meta, versions)
	}
}

// Presigned URLs work with plain HTTP and nothing else: a tampered one is
// refused.
func testPresign(t *testing.T, b storage.Backend) {
	putURL, err := b.PresignPut(ctx(t), "pre/sent", time.Minute)
	if errors.Is(err, storage.ErrUnsupported) {
		t.Skip("this backend has no presigned URLs")
	}
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	do := func(method, url, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx(t), method, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if method == http.MethodGet {
			req.Body = nil
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	if code, msg := do(http.MethodPut, putURL, "uploaded by an agent"); code != http.StatusOK {
		t.Fatalf("presigned PUT: %d %s", code, msg)
	}
	if body, _ := get(t, b, "pre/sent"); body != "uploaded by an agent" {
		t.Fatalf("after presigned PUT: %q", body)
	}
	getURL, err := b.PresignGet(ctx(t), "pre/sent", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := do(http.MethodGet, getURL, ""); code != http.StatusOK || body != "uploaded by an agent" {
		t.Fatalf("presigned GET: %d %q", code, body)
	}
	tampered := strings.Replace(getURL, "pre/sent", "pre/senT", 1)
	if code, _ := do(http.MethodGet, tampered, ""); code != http.StatusForbidden {
		t.Fatalf("a presigned GET for another key: %d, want 403", code)
	}
	if code, _ := do(http.MethodPut, getURL, "overwritten"); code != http.StatusForbidden {
		t.Fatalf("a presigned GET used to PUT: %d, want 403", code)
	}
	missing, _ := b.PresignGet(ctx(t), "pre/missing", time.Minute)
	if code, _ := do(http.MethodGet, missing, ""); code != http.StatusNotFound {
		t.Fatalf("presigned GET of a missing key: %d, want 404", code)
	}
}
