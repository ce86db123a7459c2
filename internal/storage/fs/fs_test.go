package fs_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/storage/storagetest"
)

// newBackend opens a backend in a temporary directory with its presigned
// URLs served by a test HTTP server.
func newBackend(t *testing.T, cfg fs.Config) *fs.Backend {
	t.Helper()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "storage")
	}
	cfg.BaseURL = srv.URL + "/storage"
	b, err := fs.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux.Handle("/storage/", http.StripPrefix("/storage", b.Handler()))
	return b
}

// TestConformance runs the storage conformance suite on the filesystem.
// Proves B93, B94, B95 (docs/behaviours.md).
func TestConformance(t *testing.T) {
	storagetest.Run(t, func(t *testing.T) storage.Backend { return newBackend(t, fs.Config{}) })
}

// Overwrites and deletes leave no files behind: one body and one sidecar
// per object, no empty directories, nothing in the temporary directory.
func TestNoFilesLeftBehind(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "storage")
	b := newBackend(t, fs.Config{Dir: dir})
	ctx := t.Context()
	for i := range 5 {
		if _, err := b.Put(ctx, "a/b/c", strings.NewReader(strings.Repeat("x", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Put(ctx, "a/d", strings.NewReader("d"), nil); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); len(got) != 4 {
		t.Fatalf("files after 5 puts of a/b/c and one of a/d: %q", got)
	}
	for _, k := range []string{"a/b/c", "a/d"} {
		if err := b.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("files after deleting everything: %q", got)
	}
	if des, _ := os.ReadDir(filepath.Join(dir, "objects")); len(des) != 0 {
		t.Fatalf("directories left: %v", des)
	}
}

// files lists the regular files under dir.
func files(t *testing.T, dir string) []string {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, strings.TrimPrefix(p, dir))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A crash mid-put leaves a temporary file; the next Open removes it and
// the object is as it was.
func TestOpenRemovesWhatACrashLeft(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "storage")
	b := newBackend(t, fs.Config{Dir: dir})
	if _, err := b.Put(t.Context(), "k", strings.NewReader("whole"), nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "tmp", "body-123"), []byte("half a bo"), 0o600)
	b = newBackend(t, fs.Config{Dir: dir})
	if des, _ := os.ReadDir(filepath.Join(dir, "tmp")); len(des) != 0 {
		t.Fatalf("temporary files after Open: %v", des)
	}
	r, _, err := b.Get(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if data, _ := io.ReadAll(r); string(data) != "whole" {
		t.Fatalf("got %q", data)
	}
}

// Presigned URLs expire, and an upload through one is bounded.
func TestPresignedURLsExpireAndUploadsAreBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	b := newBackend(t, fs.Config{MaxUploadBytes: 10, Clock: func() time.Time { return now }})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	put := func(url, body string) int {
		req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	url, err := b.PresignPut(t.Context(), "k", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if code := put(url, "0123456789A"); code != http.StatusRequestEntityTooLarge {
		t.Fatalf("11 bytes through a 10-byte limit: %d", code)
	}
	if _, err := b.Head(t.Context(), "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("a refused upload stored something: %v", err)
	}
	if code := put(url, "0123456789"); code != http.StatusOK {
		t.Fatalf("10 bytes: %d", code)
	}
	now = now.Add(61 * time.Second)
	if code := put(url, "late"); code != http.StatusForbidden {
		t.Fatalf("an expired URL: %d", code)
	}
	bare, err := fs.Open(fs.Config{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.PresignGet(t.Context(), "k", time.Minute); !errors.Is(err, storage.ErrUnsupported) {
		t.Fatalf("presign without a base URL: %v", err)
	}
}
