package s3_test

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/storage/s3"
	"github.com/kilnci/kiln/internal/storage/storagetest"
)

// newBackend returns a backend on a fresh bucket of srv, reached at
// endpoint (srv's, or a proxy's in front of it).
func newBackend(t *testing.T, srv *storagetest.S3Server, bucket, endpoint string) *s3.Backend {
	t.Helper()
	return newBackendWith(t, srv, bucket, endpoint, nil)
}

func newBackendWith(t *testing.T, srv *storagetest.S3Server, bucket, endpoint string, log *slog.Logger) *s3.Backend {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(client.CloseIdleConnections)
	b, err := s3.New(s3.Config{
		Endpoint: endpoint, Bucket: bucket, Region: srv.Region, PathStyle: true,
		AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, HTTPClient: client, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConformance runs the storage conformance suite against a real S3
// server (versitygw). versitygw 1.8.0 applies a self-copy's metadata by
// path after checking the ETag, so a put landing in that instant gets the
// touch's metadata: when touches race puts, the suite checks only that no
// older body comes back. A put between a touch's read and its copy is
// checked in full here and in
// TestTouchOfAReplacedObjectGets412AndWritesNothing.
// Proves B93, B94, B95 (docs/behaviours.md).
func TestConformance(t *testing.T) {
	srv := storagetest.StartVersitygw(t)
	storagetest.RunWith(t, func(t *testing.T) storage.Backend { return newBackend(t, srv, srv.NewBucket(t), srv.Endpoint) },
		storagetest.Limits{NonAtomicSelfCopy: true})
}
