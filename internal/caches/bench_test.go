package caches_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/caches"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/storage/s3"
	"github.com/kilnci/kiln/internal/storage/storagetest"
	"github.com/kilnci/kiln/internal/store"
	"github.com/kilnci/kiln/internal/store/storetest"
)

// BenchmarkCacheRestore (B225) is a cache restore's latency on the server: find
// the cache (a miss on the exact key, then a restore key's prefix, among
// 100 caches of the scope), stream its 1 MiB body out of the storage, and
// record the access (the database row and the object's conditional
// touch). On the filesystem backend and on S3 (versitygw).
func BenchmarkCacheRestore(b *testing.B) {
	const size = 1 << 20
	for _, backend := range []string{"fs", "s3"} {
		b.Run(backend, func(b *testing.B) {
			var blobs caches.Blobs
			switch backend {
			case "fs":
				be, err := fs.Open(fs.Config{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				blobs = be
			case "s3":
				srv := storagetest.StartVersitygw(b)
				be, err := s3.New(s3.Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(b), Region: srv.Region, PathStyle: true,
					AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
				if err != nil {
					b.Fatal(err)
				}
				blobs = be
			}
			clock := storetest.NewClock()
			f := &fixture{db: storetest.New(b, storetest.WithClock(clock.Now)), clock: clock}
			s, err := caches.New(f.db, blobs, caches.Config{Clock: clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			f.s = s
			job := f.job(b, push("main"))
			body := make([]byte, size)
			rand.Read(body)
			ctx := context.Background()
			for i := range 100 {
				clock.Advance(1e9)
				if _, err := s.Save(ctx, job, fmt.Sprintf("gomod-%03d", i), bytes.NewReader(body)); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(size)
			b.ResetTimer()
			for range b.N {
				rc, hit, ok, err := s.Restore(ctx, job, "gomod-new", []string{"gomod-"})
				if err != nil || !ok || hit.Key != "gomod-099" {
					b.Fatalf("restore: %v %v %+v", ok, err, hit)
				}
				if n, _ := io.Copy(io.Discard, rc); n != size {
					b.Fatalf("%d bytes", n)
				}
				rc.Close()
			}
		})
	}
}

// BenchmarkSettleWaitIdle (B217) is what the upload settle adds to every
// job success when nothing is in flight, the usual case: one indexed read.
func BenchmarkSettleWaitIdle(b *testing.B) {
	for _, backend := range storetest.Backends {
		b.Run(backend.Name, func(b *testing.B) {
			db, err := store.Open(context.Background(), store.Config{URL: backend.URL(b), Releaser: storetest.QueueAsCreated})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			s := caches.NewSettle(db, caches.SettleConfig{Timeout: time.Minute})
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				s.Wait(ctx, "job-1")
			}
		})
	}
}
