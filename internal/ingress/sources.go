package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/kilnci/kiln/internal/store"
)

// Sources resolves configured sources and keeps one forge.Repo per source,
// so the per-commit workflow cache is shared by every delivery.
type Sources struct {
	db   *store.DB
	opts forge.Options

	mu    sync.Mutex
	repos map[string]cachedRepo // by source id
}

type cachedRepo struct {
	updated int64
	config  string // two updates within a millisecond share updated
	src     *forge.Source
	repo    forge.Repo
}

// workflowCacheBytes bounds the per-source cache of workflow files.
const workflowCacheBytes = 16 << 20

// NewSources returns a resolver over the store's sources.
func NewSources(db *store.DB, opts forge.Options) *Sources {
	return &Sources{db: db, opts: opts, repos: map[string]cachedRepo{}}
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

// ByName returns a source's configuration, or nil when there is none.
func (s *Sources) ByName(ctx context.Context, name string) (store.Source, *forge.Source, error) {
	st, err := s.db.Sources().GetByName(ctx, name)
	if kiln.ErrorCode(err) == kiln.CodeNotFound {
		return store.Source{}, nil, nil
	}
	if err != nil {
		return store.Source{}, nil, err
	}
	fs, err := Decode(st)
	return st, fs, err
}

// Repo returns the forge client of a source (by id), rebuilt when the
// source's configuration changed.
func (s *Sources) Repo(ctx context.Context, id string) (*forge.Source, forge.Repo, error) {
	st, err := s.db.Sources().Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	c, ok := s.repos[id]
	s.mu.Unlock()
	if ok && c.updated == st.UpdatedAt.UnixNano() && c.config == string(st.Config) {
		return c.src, c.repo, nil
	}
	fs, err := Decode(st)
	if err != nil {
		return nil, nil, err
	}
	repo, err := forge.NewRepo(fs, s.opts)
	if err != nil {
		return nil, nil, err
	}
	repo = forge.WithWorkflowCache(repo, workflowCacheBytes)
	s.mu.Lock()
	s.repos[id] = cachedRepo{updated: st.UpdatedAt.UnixNano(), config: string(st.Config), src: fs, repo: repo}
	s.mu.Unlock()
	return fs, repo, nil
}
