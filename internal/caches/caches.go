// Package caches keeps the caches jobs save and restore (a dependency
// directory, a build cache): an agent streams a cache (a gzipped tar)
// through the orchestrator into the storage backend and back, so agents
// never hold storage credentials; the database indexes them
// (store.Caches). It also holds the upload settle: a job's success waits
// for the uploads it started. See docs/storage.md#caches.
package caches

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/store"
)

// DefaultMaxBytes is caches.max_bytes: what one repository's caches may
// take in all (the least recently used are evicted past it); one cache
// larger than it is refused.
const DefaultMaxBytes = 10 << 30

// MaxKeyBytes bounds a cache key and a restore key (GitHub's bound).
const MaxKeyBytes = 512

// Blobs is the part of the storage backend caches use.
type Blobs interface {
	storage.MetaUpdater
	Put(ctx context.Context, key string, body io.Reader, meta storage.Meta) (storage.Object, error)
	Get(ctx context.Context, key string) (io.ReadCloser, storage.Object, error)
	Delete(ctx context.Context, key string) error
}

// Tracker records uploads in flight for the settle (Settle is one).
type Tracker interface {
	Begin(ctx context.Context, jobID, kind, name string) (end func(), err error)
}

// Config configures a Service.
type Config struct {
	MaxBytes int64 // caches.max_bytes; 0: DefaultMaxBytes
	// Idle bounds how long a transfer may make no progress; default 30 s.
	Idle    time.Duration
	Tracker Tracker // nil: uploads are not tracked
	Clock   func() time.Time
	Logger  *slog.Logger
}

// Service stores and serves caches.
type Service struct {
	db    *store.DB
	blobs Blobs
	cfg   Config
}

// New returns a Service over the database and the storage backend.
func New(db *store.DB, blobs Blobs, cfg Config) (*Service, error) {
	if db == nil || blobs == nil {
		return nil, errors.New("caches: a database and a storage backend are required")
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("caches.max_bytes must not be negative, got %d", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Service{db: db, blobs: blobs, cfg: cfg}, nil
}

// Prefix is where every cache body is stored.
const Prefix = "caches/"

// objectKey is a new object for a cache: under a digest of where the
// cache is (any key text stays a valid storage key), with a random part so
// that a save that loses the race for the key never touches the winner's
// body.
func objectKey(ns, scope, key string) string {
	sum := sha256.Sum256([]byte(ns + "\x00" + scope + "\x00" + key))
	return Prefix + hex.EncodeToString(sum[:16]) + "/" + rand.Text()
}

// CheckKey applies the rules of a cache key or restore key as rendered:
// not empty, at most MaxKeyBytes, no control characters.
func CheckKey(key string) error {
	switch {
	case key == "":
		return kiln.Errorf(kiln.CodeInvalid, "a cache key must not be empty")
	case len(key) > MaxKeyBytes:
		return kiln.Errorf(kiln.CodeInvalid, "cache key %.40q… is longer than %d bytes", key, MaxKeyBytes)
	}
	for _, r := range key {
		if r < 0x20 || r == 0x7f {
			return kiln.Errorf(kiln.CodeInvalid, "cache key %q holds a control character", key)
		}
	}
	return nil
}

// Hit is the cache a restore found.
type Hit struct {
	Key   string
	Scope string
	Exact bool // the key itself, not a restore key's prefix
	Size  int64
	// Searched are the scopes looked in, in order (also when nothing
	// matched).
	Searched []string
}

// Restore finds a job's cache — in each of its scopes in order, first
// key exactly, then each restore key as a prefix (the most recently saved
// match) — and opens its body; the caller closes it. ok is false when
// nothing matches.
func (s *Service) Restore(ctx context.Context, jobID, key string, restoreKeys []string) (io.ReadCloser, Hit, bool, error) {
	for _, k := range append([]string{key}, restoreKeys...) {
		if err := CheckKey(k); err != nil {
			return nil, Hit{}, false, err
		}
	}
	sc, err := s.scopes(ctx, jobID)
	if err != nil {
		return nil, Hit{}, false, err
	}
	for _, scope := range sc.Restore {
		// A row whose body is gone (deleted by hand, or by retention since
		// the row was read) is forgotten and the scope searched again.
		for range 4 {
			c, ok, err := s.find(ctx, sc.Namespace, scope, key, restoreKeys)
			if err != nil {
				return nil, Hit{}, false, err
			}
			if !ok {
				break
			}
			body, _, err := s.blobs.Get(ctx, c.StorageKey)
			if errors.Is(err, storage.ErrNotFound) {
				_ = s.db.Caches().Delete(ctx, c)
				continue
			}
			if err != nil {
				return nil, Hit{}, false, err
			}
			if err := s.db.Caches().Touch(ctx, c); err != nil {
				s.cfg.Logger.Warn("caches: recording a restore failed", "key", c.Key, "err", err)
			}
			return &touchOnClose{ReadCloser: body, touch: func() { s.touchObject(ctx, c.StorageKey) }},
				Hit{Key: c.Key, Scope: scope, Exact: c.Key == key, Size: c.Size, Searched: sc.Restore}, true, nil
		}
	}
	return nil, Hit{Searched: sc.Restore}, false, nil
}

// find looks in one scope: the key exactly, then each restore key as a
// prefix.
func (s *Service) find(ctx context.Context, ns, scope, key string, restoreKeys []string) (store.Cache, bool, error) {
	c, ok, err := s.db.Caches().Exact(ctx, ns, scope, key)
	for i := 0; err == nil && !ok && i < len(restoreKeys); i++ {
		c, ok, err = s.db.Caches().Prefixed(ctx, ns, scope, restoreKeys[i])
	}
	return c, ok, err
}

// touchObject refreshes the object's own last-accessed-at too, for whoever
// looks at the bucket: a conditional touch (B89–B94) that
// never writes an older object's metadata back over a newer put. It runs
// once the body was served, off the restore's latency.
func (s *Service) touchObject(ctx context.Context, key string) {
	if _, err := storage.Touch(context.WithoutCancel(ctx), s.blobs, key, s.cfg.Clock()); err != nil {
		s.cfg.Logger.Debug("caches: touching the object failed", "key", key, "err", err)
	}
}

// touchOnClose runs touch once, when the body is closed.
type touchOnClose struct {
	io.ReadCloser
	touch func()
	once  sync.Once
}

func (t *touchOnClose) Close() error {
	err := t.ReadCloser.Close()
	t.once.Do(t.touch)
	return err
}

func (s *Service) scopes(ctx context.Context, jobID string) (Scopes, error) {
	jr, err := s.db.Caches().JobRun(ctx, jobID)
	if err != nil {
		return Scopes{}, err
	}
	return ScopesOf(jr)
}

// Saved is a cache a save stored.
type Saved struct {
	Key, Scope string
	Size       int64
}

// Save streams a job's cache into the storage backend and records it
// under key in the job's own scope. A key already saved there is a
// conflict, found before the body is read (and again after, for a save
// that raced another); a fork pull request's job may not save; a body over
// MaxBytes is refused and nothing kept. A saved cache past the
// repository's caches.max_bytes evicts the least recently used others.
func (s *Service) Save(ctx context.Context, jobID, key string, body io.Reader) (Saved, error) {
	if err := CheckKey(key); err != nil {
		return Saved{}, err
	}
	sc, err := s.scopes(ctx, jobID)
	if err != nil {
		return Saved{}, err
	}
	if sc.Save == "" {
		return Saved{}, kiln.Errorf(kiln.CodeForbidden, "%s", sc.NoSave)
	}
	if _, ok, err := s.db.Caches().Exact(ctx, sc.Namespace, sc.Save, key); err != nil || ok {
		if err == nil {
			err = s.taken(key, sc.Save)
		}
		return Saved{}, err
	}
	if s.cfg.Tracker != nil {
		end, err := s.cfg.Tracker.Begin(ctx, jobID, "cache", key)
		if err != nil {
			return Saved{}, err
		}
		defer end()
	}
	k := objectKey(sc.Namespace, sc.Save, key)
	lim := &limited{r: body, left: s.cfg.MaxBytes}
	obj, err := s.blobs.Put(ctx, k, lim, storage.Fresh(storage.Meta{}, s.cfg.Clock()))
	if lim.over {
		return Saved{}, kiln.Errorf(kiln.CodeTooLarge, "cache %q is larger than caches.max_bytes (%d bytes)", key, s.cfg.MaxBytes)
	}
	if err != nil {
		return Saved{}, fmt.Errorf("store cache %q: %w", key, err)
	}
	won, err := s.db.Caches().Record(ctx, store.Cache{Namespace: sc.Namespace, Scope: sc.Save, Key: key, StorageKey: k, Size: obj.Size})
	if err != nil || !won {
		_ = s.blobs.Delete(context.WithoutCancel(ctx), k)
		if err == nil {
			err = s.taken(key, sc.Save)
		}
		return Saved{}, err
	}
	s.evict(ctx, sc.Namespace)
	return Saved{Key: key, Scope: sc.Save, Size: obj.Size}, nil
}

func (s *Service) taken(key, scope string) error {
	return kiln.Errorf(kiln.CodeConflict, "cache %q is already saved in %s; cache keys are never overwritten "+
		"(put what changes the content, e.g. hashFiles('go.sum'), in the key)", key, scope)
}

// evict deletes the namespace's least recently used caches beyond
// caches.max_bytes.
func (s *Service) evict(ctx context.Context, ns string) {
	over, err := s.db.Caches().OverCap(ctx, ns, s.cfg.MaxBytes)
	if err != nil {
		s.cfg.Logger.Warn("caches: listing caches over caches.max_bytes failed", "namespace", ns, "err", err)
		return
	}
	for _, c := range over {
		if err := s.Remove(ctx, c); err != nil {
			s.cfg.Logger.Warn("caches: evicting a cache failed", "key", c.Key, "err", err)
			return
		}
		s.cfg.Logger.Info("caches: evicted a cache over caches.max_bytes", "namespace", ns, "scope", c.Scope, "key", c.Key, "bytes", c.Size)
	}
}

// Remove deletes a cache: its row first, so that no restore finds it, then
// its body.
func (s *Service) Remove(ctx context.Context, c store.Cache) error {
	if err := s.db.Caches().Delete(ctx, c); err != nil {
		return err
	}
	return s.blobs.Delete(ctx, c.StorageKey)
}

// limited reads at most left bytes from r and fails past them.
type limited struct {
	r    io.Reader
	left int64
	over bool
}

var errOver = errors.New("cache over the size limit")

func (l *limited) Read(p []byte) (int, error) {
	if l.left < 0 {
		l.over = true
		return 0, errOver
	}
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left < 0 {
		l.over = true
		return n, errOver
	}
	return n, err
}
