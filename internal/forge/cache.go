package forge

import "context"

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
	return &cachedRepo{Repo: r, commits: newSizedLRU[cacheKey, []WorkflowFile](maxBytes)}
}

type cachedRepo struct {
	Repo
	commits *sizedLRU[cacheKey, []WorkflowFile]
}

type cacheKey struct{ repo, sha string }

func (c *cachedRepo) Workflows(ctx context.Context, repo, sha string) ([]WorkflowFile, error) {
	k := cacheKey{repo, sha}
	if files, ok := c.commits.get(k); ok {
		return append([]WorkflowFile(nil), files...), nil
	}
	files, err := c.Repo.Workflows(ctx, repo, sha)
	if err != nil {
		return nil, err
	}
	size := int64(len(repo) + len(sha) + 64)
	for _, f := range files {
		size += int64(len(f.Path)+len(f.Content)) + 64
	}
	c.commits.put(k, append([]WorkflowFile(nil), files...), size)
	return files, nil
}
