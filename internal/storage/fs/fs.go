// Package fs is the filesystem storage backend, kiln's default: objects in
// a directory on the server's own disk (data_dir/storage). Only the server
// that owns the directory can read them, so several servers sharing a
// PostgreSQL database need the s3 backend instead.
//
// Each object is two files side by side: its body, named after the key's
// last segment plus "#" and a generation (a random id, which is also the
// object's ETag), and a JSON sidecar ("#meta") holding the generation, the
// size and the metadata. A put streams the body into a temporary file,
// then renames the body and then the sidecar into place; the sidecar's
// rename is the commit, so a reader sees the old object or the new one,
// whole, with its own metadata. Renames of one key are serialised by a
// lock in the process (the directory belongs to one server), which also
// makes UpdateMeta a compare-and-set on the generation.
package fs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kilnci/kiln/internal/storage"
)

// Config configures a filesystem backend.
type Config struct {
	// Dir holds the objects; created 0700 if missing.
	Dir string
	// BaseURL is where Handler is served, e.g.
	// https://ci.example.com/storage; presigned URLs are BaseURL/<key>?….
	// Empty: PresignGet and PresignPut return storage.ErrUnsupported.
	BaseURL string
	// Secret signs presigned URLs; default 32 random bytes, so a restart
	// invalidates the URLs handed out before it.
	Secret []byte
	// MaxUploadBytes bounds a body uploaded through Handler (default 1 GiB).
	MaxUploadBytes int64
	// Clock is used for Modified times and URL expiry; default time.Now.
	Clock func() time.Time
}

// Backend is a storage.Backend on a local directory.
type Backend struct {
	objects string // the key tree
	tmp     string // bodies and sidecars being written
	cfg     Config
	locks   [64]sync.Mutex
}

var _ storage.Backend = (*Backend)(nil)

// Open prepares dir and returns the backend. Temporary files a crash left
// behind are removed.
func Open(cfg Config) (*Backend, error) {
	if cfg.Dir == "" {
		return nil, errors.New("storage fs: no directory")
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.MaxUploadBytes <= 0 {
		cfg.MaxUploadBytes = 1 << 30
	}
	if len(cfg.Secret) == 0 {
		cfg.Secret = make([]byte, 32)
		if _, err := rand.Read(cfg.Secret); err != nil {
			return nil, err
		}
	}
	b := &Backend{objects: filepath.Join(cfg.Dir, "objects"), tmp: filepath.Join(cfg.Dir, "tmp"), cfg: cfg}
	if err := os.RemoveAll(b.tmp); err != nil {
		return nil, fmt.Errorf("storage fs: %w", err)
	}
	for _, d := range []string{cfg.Dir, b.objects, b.tmp} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("storage fs: %w", err)
		}
	}
	return b, nil
}

// lock serialises the commits of one key (and of the keys sharing its
// stripe).
func (b *Backend) lock(key string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(key))
	return &b.locks[h.Sum32()%uint32(len(b.locks))]
}

// Put implements storage.Backend.
func (b *Backend) Put(ctx context.Context, key string, body io.Reader, meta storage.Meta) (storage.Object, error) {
	if err := check(key, meta); err != nil {
		return storage.Object{}, err
	}
	tmpBody, size, err := b.writeTemp("body-*", ctxReader{ctx, body})
	if err != nil {
		return storage.Object{}, fmt.Errorf("storage fs: put %s: %w", key, err)
	}
	defer os.Remove(tmpBody) // a no-op once it is renamed
	gen := newGeneration()
	side := sidecar{Gen: gen, Size: size, Modified: b.cfg.Clock().UTC(), Meta: meta}
	tmpSide, err := b.writeSidecarTemp(side)
	if err != nil {
		return storage.Object{}, fmt.Errorf("storage fs: put %s: %w", key, err)
	}
	defer os.Remove(tmpSide)
	if err := ctx.Err(); err != nil {
		return storage.Object{}, err
	}
	p := b.path(key)
	old, err := b.commit(key, p, tmpBody, tmpSide, gen)
	if err != nil {
		return storage.Object{}, fmt.Errorf("storage fs: put %s: %w", key, err)
	}
	if old != "" && old != gen {
		os.Remove(p.body(old))
	}
	if err := syncDir(p.dir); err != nil {
		return storage.Object{}, fmt.Errorf("storage fs: put %s: %w", key, err)
	}
	return side.object(key, false), nil
}

// commit renames the body and then the sidecar into place under the key's
// lock, and returns the generation it replaced ("" if none).
func (b *Backend) commit(key string, p objPath, tmpBody, tmpSide, gen string) (string, error) {
	mu := b.lock(key)
	mu.Lock()
	defer mu.Unlock()
	var old string
	if s, err := readSidecar(p.meta()); err == nil {
		old = s.Gen
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	// A Delete of a neighbour may remove the directory between MkdirAll
	// and the rename; make it again then.
	for try := 0; ; try++ {
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			return "", err
		}
		err := os.Rename(tmpBody, p.body(gen))
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrNotExist) || try == 3 {
			return "", err
		}
	}
	if err := os.Rename(tmpSide, p.meta()); err != nil {
		os.Remove(p.body(gen))
		return "", err
	}
	return old, nil
}

// Get implements storage.Backend.
func (b *Backend) Get(ctx context.Context, key string) (io.ReadCloser, storage.Object, error) {
	if err := check(key, nil); err != nil {
		return nil, storage.Object{}, err
	}
	p := b.path(key)
	// The sidecar and the body are read under the lock, so they belong to
	// one write; once open, the body stays readable whatever replaces it.
	mu := b.lock(key)
	mu.Lock()
	s, err := readSidecar(p.meta())
	var f *os.File
	if err == nil {
		f, err = os.Open(p.body(s.Gen))
	}
	mu.Unlock()
	if err != nil {
		return nil, storage.Object{}, notFound(key, err)
	}
	return f, s.object(key, true), nil
}

// Head implements storage.Backend.
func (b *Backend) Head(ctx context.Context, key string) (storage.Object, error) {
	if err := check(key, nil); err != nil {
		return storage.Object{}, err
	}
	// A sidecar is only ever replaced by a rename: read without the lock,
	// it is one whole version.
	s, err := readSidecar(b.path(key).meta())
	if err != nil {
		return storage.Object{}, notFound(key, err)
	}
	return s.object(key, true), nil
}

// UpdateMeta implements storage.Backend.
func (b *Backend) UpdateMeta(ctx context.Context, key string, meta storage.Meta, etag string) (bool, error) {
	if err := check(key, meta); err != nil {
		return false, err
	}
	p := b.path(key)
	mu := b.lock(key)
	mu.Lock()
	defer mu.Unlock()
	s, err := readSidecar(p.meta())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("storage fs: %s: %w", key, err)
	}
	if etag != "" && etag != s.Gen {
		return false, nil
	}
	s.Meta, s.Modified = meta, b.cfg.Clock().UTC()
	tmp, err := b.writeSidecarTemp(s)
	if err != nil {
		return false, fmt.Errorf("storage fs: %s: %w", key, err)
	}
	if err := os.Rename(tmp, p.meta()); err != nil {
		os.Remove(tmp)
		return false, fmt.Errorf("storage fs: %s: %w", key, err)
	}
	return true, nil
}

// Delete implements storage.Backend.
func (b *Backend) Delete(ctx context.Context, key string) error {
	if err := check(key, nil); err != nil {
		return err
	}
	p := b.path(key)
	mu := b.lock(key)
	mu.Lock()
	s, err := readSidecar(p.meta())
	if err == nil {
		err = os.Remove(p.meta())
	}
	mu.Unlock()
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage fs: delete %s: %w", key, err)
	}
	os.Remove(p.body(s.Gen))
	b.pruneDirs(p.dir)
	return nil
}

// pruneDirs removes dir and its parents up to the objects root while they
// are empty, so deleted prefixes leave no directories behind.
func (b *Backend) pruneDirs(dir string) {
	for dir != b.objects && len(dir) > len(b.objects) {
		if os.Remove(dir) != nil {
			return
		}
		dir = filepath.Dir(dir)
	}
}

func check(key string, meta storage.Meta) error {
	if err := storage.CheckKey(key); err != nil {
		return err
	}
	return storage.CheckMeta(meta)
}

func notFound(key string, err error) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %s", storage.ErrNotFound, key)
	}
	return fmt.Errorf("storage fs: %s: %w", key, err)
}

func newGeneration() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ctxReader ends a streamed body when its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
