package server

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/kilnci/kiln/internal/logstore"
	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/storage/fs"
	"github.com/kilnci/kiln/internal/storage/s3"
)

// storageCheckTimeout bounds the start-up check of an S3 bucket: a store
// that cannot be reached delays the start by this much and a warning.
const storageCheckTimeout = 5 * time.Second

// openStorage opens the storage backend the configuration names (docs/
// storage.md): the filesystem under data_dir/storage, or an S3 bucket
// with credentials from the environment variables the configuration
// names. On a PostgreSQL database the filesystem backend is this server's
// alone, which it says.
func openStorage(ctx context.Context, cfg Config, getenv func(string) string, log *slog.Logger) (storage.Backend, error) {
	log = log.With("part", "storage")
	if cfg.Storage.Backend != "s3" {
		if strings.HasPrefix(cfg.Database, "postgres://") || strings.HasPrefix(cfg.Database, "postgresql://") {
			log.Warn("storage.backend is filesystem on a shared PostgreSQL database: other servers cannot read this server's "+
				"logs and artifacts; set storage.backend to s3 to share them (docs/storage.md)", "dir", filepath.Join(cfg.DataDir, "storage"))
		}
		return fs.Open(fs.Config{Dir: filepath.Join(cfg.DataDir, "storage")})
	}
	c := cfg.Storage.S3
	access, secret := getenv(c.AccessKeyEnv), getenv(c.SecretKeyEnv)
	if access == "" || secret == "" {
		return nil, fmt.Errorf("storage.backend is s3 but %s or %s is not set in the environment "+
			"(storage.s3.access_key_env and storage.s3.secret_key_env name them)", c.AccessKeyEnv, c.SecretKeyEnv)
	}
	b, err := s3.New(s3.Config{
		Endpoint: c.Endpoint, Bucket: c.Bucket, Region: c.Region, PathStyle: c.PathStyle,
		AccessKey: access, SecretKey: secret, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, storageCheckTimeout)
	defer cancel()
	if err := b.Check(cctx); err != nil {
		log.Warn("the S3 bucket cannot be reached or used yet; storage fails until it can", "error", err)
	}
	return b, nil
}

// logArchive is where step logs are shipped: a shared (S3) backend, so
// every server on the database reads them. The filesystem backend is this
// server's alone, and its logs directory already is that: nothing is
// shipped (docs/storage.md).
func logArchive(cfg Config, b storage.Backend) logstore.Archive {
	if cfg.Storage.Backend != "s3" {
		return nil
	}
	return b
}
