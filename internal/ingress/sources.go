package ingress

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// Sources resolves configured sources and keeps one forge.Repo per source,
// so the per-commit workflow cache is shared by every delivery, and so
// dispatch does not read a source's row for every job it sends
// (sourcecache.go says when a cached source is trusted).
type Sources struct {
	db   *store.DB
	opts forge.Options
	log  *slog.Logger

	now   func() time.Time
	trust time.Duration // SourceTrust
	// shared: other servers write the sources too (PostgreSQL), so an
	// entry is trusted only while Listen hears their writes.
	shared    bool
	listening atomic.Bool

	mu sync.Mutex
	// gen counts invalidations: a row read that began before one may be
	// older than the write, and is not trusted.
	gen   uint64
	repos map[string]cachedRepo // by source id
	names map[string]string     // source ids by name, for ByName
}

type cachedRepo struct {
	row     store.Source // as last read
	updated int64
	config  string // two updates within a millisecond share updated
	src     *forge.Source
	repo    forge.Repo
	checked time.Time // when the row was last read and matched
	stale   bool      // invalidated since: read the row before using it
}

// workflowCacheBytes bounds the per-source cache of workflow files.
const workflowCacheBytes = 16 << 20

// NewSources returns a resolver over the store's sources. Every write of
// a source through db drops its entry before the write returns (for as
// long as db is open); Listen hears the other servers' writes.
func NewSources(db *store.DB, opts forge.Options) *Sources {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sources{db: db, opts: opts, log: log, now: time.Now, trust: SourceTrust,
		shared: db.Dialect() == "postgres", repos: map[string]cachedRepo{}, names: map[string]string{}}
	db.WatchSources(s.Forget)
	return s
}

// Decode turns a stored source into its forge configuration.
func Decode(s store.Source) (*forge.Source, error) {
	var fs forge.Source
	if err := json.Unmarshal(s.Config, &fs); err != nil {
		return nil, fmt.Errorf("source %s: stored configuration does not decode: %w", s.Name, err)
	}
	fs.Name, fs.Kind = s.Name, s.Kind
	return &fs, nil
}

// Encode turns a forge configuration into what the store keeps.
func Encode(fs *forge.Source) (store.Source, error) {
	raw, err := json.Marshal(fs)
	if err != nil {
		return store.Source{}, err
	}
	return store.Source{Kind: fs.Kind, Name: fs.Name, Config: raw}, nil
}
