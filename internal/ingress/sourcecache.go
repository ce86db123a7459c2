package ingress

import (
	"context"
	"errors"
	"time"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// SourceTrust is how long a cached source is used without reading its row
// again. A write drops the entry at once — on this server before the write
// returns (store.DB.WatchSources), on the others when its notification
// arrives (Listen) — so the TTL only bounds what a missed notification
// leaves stale: a listener connection that died without an error (a
// half-open TCP connection waits on, hearing nothing) or a notification
// PostgreSQL dropped. Five seconds: a removed credential reaches at most
// the jobs sent in that window in that rare case, while a source's row is
// read once per 5 s instead of once per job (14% of the server's CPU in
// the dispatch bench).
const SourceTrust = 5 * time.Second

// Listen backoff between reconnections of the notification listener.
const (
	listenBackoff    = 100 * time.Millisecond
	listenBackoffMax = 5 * time.Second
)

// Repo returns the forge client of a source (by id), rebuilt when the
// source's configuration changed. The cached client is used without
// reading the row when it was read and matched within SourceTrust, no
// write of the source was heard since, and writes are heard: always on
// SQLite (every write goes through this process), on PostgreSQL while
// Listen is connected. Otherwise the row is read (and compared: an
// unchanged source keeps its client and workflow cache). A source that is
// gone is kiln.CodeNotFound.
func (s *Sources) Repo(ctx context.Context, id string) (*forge.Source, forge.Repo, error) {
	now := s.now()
	s.mu.Lock()
	c, ok := s.repos[id]
	gen := s.gen
	s.mu.Unlock()
	if ok && s.trusted(c, now) {
		return c.src, c.repo, nil
	}
	st, err := s.db.Sources().Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	c, err = s.remember(st, c, ok, gen, now)
	return c.src, c.repo, err
}

// ByName is Repo's cache by a source's name, for the webhook's path: the
// source's row and configuration, or nil when there is none.
func (s *Sources) ByName(ctx context.Context, name string) (store.Source, *forge.Source, error) {
	now := s.now()
	s.mu.Lock()
	id, named := s.names[name]
	c, ok := s.repos[id]
	gen := s.gen
	s.mu.Unlock()
	if named && ok && c.row.Name == name && s.trusted(c, now) {
		return c.row, c.src, nil
	}
	st, err := s.db.Sources().GetByName(ctx, name)
	if kiln.ErrorCode(err) == kiln.CodeNotFound {
		return store.Source{}, nil, nil
	}
	if err != nil {
		return store.Source{}, nil, err
	}
	s.mu.Lock()
	c, ok = s.repos[st.ID]
	s.mu.Unlock()
	c, err = s.remember(st, c, ok, gen, now)
	return st, c.src, err
}

// trusted reports whether c may be used without reading its row.
func (s *Sources) trusted(c cachedRepo, now time.Time) bool {
	return !c.stale && now.Sub(c.checked) < s.trust && s.hearing()
}

// remember caches the row st, read after the invalidation count was gen:
// its client is rebuilt when its configuration changed since c (which
// ok says is cached), kept otherwise.
func (s *Sources) remember(st store.Source, c cachedRepo, ok bool, gen uint64, now time.Time) (cachedRepo, error) {
	if !ok || c.updated != st.UpdatedAt.UnixNano() || c.config != string(st.Config) {
		fs, err := Decode(st)
		if err != nil {
			return cachedRepo{}, err
		}
		repo, err := forge.NewRepo(fs, s.opts)
		if err != nil {
			return cachedRepo{}, err
		}
		c = cachedRepo{updated: st.UpdatedAt.UnixNano(), config: string(st.Config), src: fs,
			repo: forge.WithWorkflowCache(repo, workflowCacheBytes)}
	}
	c.row, c.checked = st, now
	s.mu.Lock()
	// An invalidation while the row was read: the row may predate the
	// write it announced. Use it this once; the next use reads again.
	c.stale = s.gen != gen
	s.repos[st.ID] = c
	s.names[st.Name] = st.ID
	s.mu.Unlock()
	return c, nil
}

// hearing reports whether every write of a source reaches Forget.
func (s *Sources) hearing() bool { return !s.shared || s.listening.Load() }

// Forget invalidates the cached source id: its next use reads the row.
func (s *Sources) Forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	if c, ok := s.repos[id]; ok {
		c.stale = true
		s.repos[id] = c
	}
}

// forgetAll invalidates every cached source.
func (s *Sources) forgetAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	for id, c := range s.repos {
		c.stale = true
		s.repos[id] = c
	}
}

// Listen hears the other servers' writes of sources until ctx ends: on
// PostgreSQL a notification per write (store.SourcesChannel) invalidates
// the source here. It reconnects with backoff; until it listens, and while
// it reconnects, cached sources are not trusted (every use reads the row),
// and once it listens again all are invalidated, since writes went unheard
// meanwhile. It returns at once on SQLite, where every write goes through
// this process.
func (s *Sources) Listen(ctx context.Context) error {
	backoff := listenBackoff
	for {
		err := s.db.Listen(ctx, store.SourcesChannel, func() {
			backoff = listenBackoff
			s.forgetAll()
			s.listening.Store(true)
		}, s.Forget)
		s.listening.Store(false)
		if errors.Is(err, store.ErrNoNotifications) || ctx.Err() != nil {
			return nil
		}
		s.log.Warn("sources: the change listener failed; reconnecting (until then every use reads the source)", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, listenBackoffMax)
	}
}
