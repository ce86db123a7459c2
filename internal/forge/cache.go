package forge

import (
	"container/list"
	"context"
	"sync"
)

// DefaultWorkflowCacheBytes bounds a workflow cache.
const DefaultWorkflowCacheBytes = 32 << 20

// WithWorkflowCache returns r with its Workflows answers cached by
// (repo, sha). A commit's files never change, so a second event on the
// same commit (a push and its pull request, a rerun, a redelivery) costs no
// forge call. Failures are not cached. The cache holds at most maxBytes of
// file content (DefaultWorkflowCacheBytes when ≤ 0), dropping the least
// recently used commit first. Callers must treat the returned contents as
// read-only: they are shared.
func WithWorkflowCache(r Repo, maxBytes int64) Repo {
	if maxBytes <= 0 {
		maxBytes = DefaultWorkflowCacheBytes
	}
	return &cachedRepo{Repo: r, max: maxBytes, items: map[cacheKey]*list.Element{}, lru: list.New()}
}

type cachedRepo struct {
	Repo
	max int64

	mu    sync.Mutex
	size  int64
	items map[cacheKey]*list.Element // of *cacheItem
	lru   *list.List
}

type cacheKey struct{ repo, sha string }

type cacheItem struct {
	key   cacheKey
	files []WorkflowFile
	size  int64
}

func (c *cachedRepo) Workflows(ctx context.Context, repo, sha string) ([]WorkflowFile, error) {
	k := cacheKey{repo, sha}
	c.mu.Lock()
	if el, ok := c.items[k]; ok {
		c.lru.MoveToFront(el)
		files := el.Value.(*cacheItem).files
		c.mu.Unlock()
		return append([]WorkflowFile(nil), files...), nil
	}
	c.mu.Unlock()
	files, err := c.Repo.Workflows(ctx, repo, sha)
	if err != nil {
		return nil, err
	}
	it := &cacheItem{key: k, files: append([]WorkflowFile(nil), files...), size: int64(len(repo) + len(sha) + 64)}
	for _, f := range files {
		it.size += int64(len(f.Path)+len(f.Content)) + 64
	}
	if it.size > c.max {
		return files, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[k]; !ok {
		c.items[k] = c.lru.PushFront(it)
		c.size += it.size
	}
	for c.size > c.max {
		old := c.lru.Remove(c.lru.Back()).(*cacheItem)
		delete(c.items, old.key)
		c.size -= old.size
	}
	return files, nil
}
