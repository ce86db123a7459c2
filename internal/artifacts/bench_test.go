package artifacts_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/kilnci/kiln/internal/artifacts"
	"github.com/kilnci/kiln/internal/storage/s3"
	"github.com/kilnci/kiln/internal/storage/storagetest"
	"github.com/kilnci/kiln/internal/store/storetest"
)

const benchBytes = 64 << 20

// versitygwBackend starts versitygw and opens the S3 backend on a fresh
// bucket.
func versitygwBackend(b *testing.B) *s3.Backend {
	srv := storagetest.StartVersitygw(b)
	be, err := s3.New(s3.Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(b), Region: srv.Region, PathStyle: true,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
	if err != nil {
		b.Fatal(err)
	}
	return be
}

func payload(b *testing.B) []byte {
	p := make([]byte, benchBytes)
	rand.Read(p)
	return p
}

// BenchmarkArtifactThroughKiln moves a 64 MiB artifact up and down the way
// an agent does: over HTTP to the server, which streams it into S3
// (versitygw) and back. Compare with BenchmarkArtifactDirectS3, the same
// bytes put and got by the S3 backend itself.
func BenchmarkArtifactThroughKiln(b *testing.B) {
	be := versitygwBackend(b)
	s, err := artifacts.New(storetest.New(b), be, artifacts.Config{})
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /a/{name}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := s.Store(r.Context(), "run1", "job1", r.PathValue("name"), r.Body); err != nil {
			http.Error(w, err.Error(), 500)
		}
	})
	mux.HandleFunc("GET /a/{name}", func(w http.ResponseWriter, r *http.Request) {
		body, art, err := s.Open(r.Context(), "run1", r.PathValue("name"))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer body.Close()
		artifacts.Serve(w, body, art.Size, time.Minute)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	p := payload(b)
	b.SetBytes(2 * benchBytes)
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("PUT", srv.URL+"/a/big", bytes.NewReader(p))
		req.ContentLength = -1
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("upload: %v %v", err, resp)
		}
		resp.Body.Close()
		resp, err = http.Get(srv.URL + "/a/big")
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, resp.Body); n != benchBytes {
			b.Fatalf("downloaded %d bytes", n)
		}
		resp.Body.Close()
	}
}

// BenchmarkArtifactDirectS3 is the baseline of BenchmarkArtifactThroughKiln.
func BenchmarkArtifactDirectS3(b *testing.B) {
	be := versitygwBackend(b)
	p := payload(b)
	ctx := context.Background()
	b.SetBytes(2 * benchBytes)
	b.ResetTimer()
	for range b.N {
		if _, err := be.Put(ctx, "direct/big", bytes.NewReader(p), nil); err != nil {
			b.Fatal(err)
		}
		body, _, err := be.Get(ctx, "direct/big")
		if err != nil {
			b.Fatal(err)
		}
		if n, _ := io.Copy(io.Discard, body); n != benchBytes {
			b.Fatalf("got %d bytes", n)
		}
		body.Close()
	}
}
