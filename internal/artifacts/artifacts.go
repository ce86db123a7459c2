// Package artifacts keeps the files jobs pass to their dependents and
// people download: an agent streams an artifact (a gzipped tar) through
// the orchestrator into the storage backend, so agents never hold storage
// credentials; the database lists them (store.Artifacts). See
// docs/storage.md.
package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/storage"
	"github.com/kilnci/kiln/internal/store"
)

// DefaultMaxBytes is artifacts.max_bytes: the largest artifact (as
// uploaded, compressed) kiln stores.
const DefaultMaxBytes = 10 << 30

// Blobs is the part of the storage backend artifacts use.
type Blobs interface {
	Put(ctx context.Context, key string, body io.Reader, meta storage.Meta) (storage.Object, error)
	Get(ctx context.Context, key string) (io.ReadCloser, storage.Object, error)
	Delete(ctx context.Context, key string) error
}

// Config configures a Service.
type Config struct {
	MaxBytes int64 // artifacts.max_bytes; 0: DefaultMaxBytes
	// Idle bounds how long a transfer may make no progress (each read of
	// an upload, each write of a download); default 30 s. The server's
	// whole-request timeouts do not apply: a large artifact takes long.
	Idle   time.Duration
	Logger *slog.Logger
	// Tracker records uploads in flight, for the upload settle (a job's
	// success waits for them); nil: not tracked.
	Tracker interface {
		Begin(ctx context.Context, jobID, kind, name string) (end func(), err error)
	}
}

// Service stores and serves artifacts.
type Service struct {
	db    *store.DB
	blobs Blobs
	cfg   Config
}

// New returns a Service over the database and the storage backend.
func New(db *store.DB, blobs Blobs, cfg Config) (*Service, error) {
	if db == nil || blobs == nil {
		return nil, errors.New("artifacts: a database and a storage backend are required")
	}
	if cfg.MaxBytes < 0 {
		return nil, fmt.Errorf("artifacts.max_bytes must not be negative, got %d", cfg.MaxBytes)
	}
	if cfg.MaxBytes == 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Idle <= 0 {
		cfg.Idle = 30 * time.Second
	}
	return &Service{db: db, blobs: blobs, cfg: cfg}, nil
}

// RunPrefix is the storage key prefix of a run's artifacts (retention
// deletes it with the run).
func RunPrefix(runID string) string { return "artifacts/" + runID + "/" }

// key is where a job's artifact is stored: under the job, so that a name
// another job of the run took never overwrites its body.
func key(runID, jobID, name string) string {
	return RunPrefix(runID) + jobID + "/" + url.PathEscape(name)
}

// CheckName applies the rules of an artifact name, as the agent renders
// it: printable, no slash or backslash, not "." or "..", at most 255 bytes.
func CheckName(name string) error {
	bad := func(why string) error { return kiln.Errorf(kiln.CodeInvalid, "artifact name %q %s", name, why) }
	switch {
	case strings.TrimSpace(name) == "":
		return bad("is empty")
	case len(name) > 255:
		return bad("is longer than 255 bytes")
	case name == "." || name == "..":
		return bad("must not be . or ..")
	case strings.ContainsAny(name, "/\\"):
		return bad("must not hold / or \\")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return bad("holds a control character")
		}
	}
	return nil
}

// errTooLarge is the size cap's error, as the agent shows it in the log.
func (s *Service) errTooLarge(name string) error {
	return kiln.Errorf(kiln.CodeTooLarge, "artifact %q is larger than artifacts.max_bytes (%d bytes)", name, s.cfg.MaxBytes)
}

// Store streams an artifact of a job into the storage backend and records
// it. A name another job of the run uploaded is a conflict, refused before
// the body is read; a body over MaxBytes is refused and nothing is kept.
func (s *Service) Store(ctx context.Context, runID, jobID, name string, body io.Reader) (store.Artifact, error) {
	if err := CheckName(name); err != nil {
		return store.Artifact{}, err
	}
	owner, err := s.db.Artifacts().Owner(ctx, runID, name)
	if err != nil {
		return store.Artifact{}, err
	}
	if owner != "" && owner != jobID {
		return store.Artifact{}, kiln.Errorf(kiln.CodeConflict, "another job of this run already uploaded an artifact named %q; "+
			"names are unique in a run (a matrix job's include its matrix values)", name)
	}
	if s.cfg.Tracker != nil {
		end, err := s.cfg.Tracker.Begin(ctx, jobID, "artifact", name)
		if err != nil {
			return store.Artifact{}, err
		}
		defer end()
	}
	k := key(runID, jobID, name)
	lim := &limited{r: body, left: s.cfg.MaxBytes}
	obj, err := s.blobs.Put(ctx, k, lim, storage.Meta{})
	if lim.over {
		return store.Artifact{}, s.errTooLarge(name)
	}
	if err != nil {
		return store.Artifact{}, fmt.Errorf("store artifact %q: %w", name, err)
	}
	art := store.Artifact{RunID: runID, Name: name, JobID: jobID, StorageKey: k, Size: obj.Size}
	if err := s.db.Artifacts().Record(ctx, art); err != nil {
		if errors.Is(err, store.ErrConflict) {
			_ = s.blobs.Delete(ctx, k) // lost a race for the name
		}
		return store.Artifact{}, err
	}
	return art, nil
}

// Open returns a run's artifact and its body; the caller closes it.
func (s *Service) Open(ctx context.Context, runID, name string) (io.ReadCloser, store.Artifact, error) {
	art, err := s.db.Artifacts().Get(ctx, runID, name)
	if err != nil {
		return nil, art, err
	}
	body, _, err := s.blobs.Get(ctx, art.StorageKey)
	if errors.Is(err, storage.ErrNotFound) {
		return nil, art, kiln.Errorf(kiln.CodeNotFound, "artifact %q is listed but its body is gone from storage", name)
	}
	return body, art, err
}

// List returns a run's artifacts.
func (s *Service) List(ctx context.Context, runID string) ([]store.Artifact, error) {
	return s.db.Artifacts().List(ctx, runID)
}

// limited reads at most left bytes from r and fails past them.
type limited struct {
	r    io.Reader
	left int64
	over bool
}

var errOver = errors.New("artifact over the size limit")

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
