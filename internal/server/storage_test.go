package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/storage/storagetest"
	"github.com/kilnci/kiln/internal/store/storetest"
)

func TestStorageConfigIsChecked(t *testing.T) {
	c := DefaultConfig()
	if c.Storage.Backend != "filesystem" {
		t.Fatalf("default storage backend %q", c.Storage.Backend)
	}
	c.Storage.Backend = "s4"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "storage.backend must be filesystem or s3") {
		t.Errorf("unknown backend: %v", err)
	}
	c = DefaultConfig()
	c.Storage.Backend = "s3"
	c.Storage.S3.Endpoint = "minio:9000"
	c.Storage.S3.AccessKeyEnv = "MY KEY"
	c.Storage.S3.Region = ""
	err := c.Validate()
	for _, want := range []string{"storage.s3.bucket", "storage.s3.endpoint", "storage.s3.access_key_env", "storage.s3.region"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("validation error lacks %q: %v", want, err)
		}
	}
	c = DefaultConfig()
	if err := c.Set("storage.s3.path_style", "maybe"); err == nil {
		t.Error("path_style accepted maybe")
	}
	env := map[string]string{"KILN_STORAGE_BACKEND": "s3", "KILN_STORAGE_S3_BUCKET": "ci", "KILN_STORAGE_S3_PATH_STYLE": "true"}
	if err := c.LoadEnv(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil || !c.Storage.S3.PathStyle || c.Storage.S3.Bucket != "ci" {
		t.Fatalf("from the environment: %+v %v", c.Storage, err)
	}
}

// lockedLog is a logger whose output a test reads while the server runs.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

const sharedWarning = "other servers cannot read this server's logs and artifacts"

// A server on PostgreSQL with the filesystem backend says at start that
// other servers cannot read its logs and artifacts; one on SQLite does not.
func TestFilesystemStorageOnPostgresWarnsAtStart(t *testing.T) {
	for _, db := range []string{"", storetest.PostgresURL(t)} {
		var logged lockedLog
		cfg := DefaultConfig()
		cfg.DataDir, cfg.Database, cfg.Listen, cfg.LocalAgents = t.TempDir(), db, "127.0.0.1:0", 0
		ctx, cancel := context.WithCancel(context.Background())
		err := Run(ctx, cfg, Options{Out: io.Discard, Logger: slog.New(slog.NewTextHandler(&logged, nil)), Ready: func(*Server) { cancel() }})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if warned := strings.Contains(logged.String(), sharedWarning); warned != (db != "") {
			t.Errorf("database %q: warned %v:\n%s", db, warned, logged.String())
		}
	}
}

func TestOpenStorage(t *testing.T) {
	ctx := context.Background()
	var logged lockedLog
	log := slog.New(slog.NewTextHandler(&logged, nil))
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	b, err := openStorage(ctx, cfg, func(string) string { return "" }, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "k", strings.NewReader("on disk"), nil); err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(cfg.DataDir, "storage", "objects", "k#*")); len(m) != 2 {
		t.Fatalf("the filesystem backend is not under data_dir/storage: %v", m)
	}

	cfg.Storage.Backend, cfg.Storage.S3.Bucket = "s3", "ci"
	if _, err := openStorage(ctx, cfg, func(string) string { return "" }, log); err == nil || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("s3 without credentials: %v", err)
	}

	srv := storagetest.StartVersitygw(t)
	cfg.Storage.S3 = S3Config{Endpoint: srv.Endpoint, Bucket: srv.NewBucket(t), Region: srv.Region, PathStyle: true,
		AccessKeyEnv: "TEST_S3_KEY", SecretKeyEnv: "TEST_S3_SECRET"}
	env := map[string]string{"TEST_S3_KEY": srv.AccessKey, "TEST_S3_SECRET": srv.SecretKey}
	b, err = openStorage(ctx, cfg, func(k string) string { return env[k] }, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "k", strings.NewReader("in the bucket"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if logged.String() != "" {
		t.Fatalf("warned with a working bucket:\n%s", logged.String())
	}
	cfg.Storage.S3.Bucket = "no-such-bucket"
	if b, err = openStorage(ctx, cfg, func(k string) string { return env[k] }, log); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logged.String(), "cannot be reached or used") {
		t.Fatalf("no warning about a missing bucket:\n%s", logged.String())
	}
	if _, _, err := b.Get(ctx, "k"); err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("get in a missing bucket: %v, want an error other than not found", err)
	}
}
