package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/tarball"
)

// Cache is a cache the job restores before its first step and saves
// after its last when it succeeded: Key and RestoreKeys are templates
// rendered after the checkout (hashFiles() sees the code), Paths globs
// relative to the workspace as an artifact's.
type Cache struct {
	Key         string
	Paths       []string
	RestoreKeys []string
}

// CacheTransfer is the part of a Transfer that moves caches.
type CacheTransfer interface {
	// RestoreCache opens the cache the orchestrator finds for key (exactly)
	// or a restore key (a prefix), in the job's scopes in order. ok is false
	// when none matches; searched then names the scopes looked in.
	RestoreCache(ctx context.Context, key string, restoreKeys []string) (body io.ReadCloser, hit CacheHit, ok bool, err error)
	// SaveCache stores the cache under key in the job's own scope.
	// ErrCacheTaken: the key is already saved there.
	SaveCache(ctx context.Context, key string, body io.Reader) error
}

// CacheHit says what a restore found, or where it looked.
type CacheHit struct {
	Key, Scope string
	Exact      bool
	Searched   string // the scopes searched, when nothing was found
}

// ErrCacheTaken is SaveCache's answer for a key already saved.
var ErrCacheTaken = errors.New("the key is already saved; cache keys are never overwritten")

// restoredCache is a cache as this job rendered and restored it.
type restoredCache struct {
	key   string // rendered; "" when it could not be
	exact bool   // restored from the key itself: nothing new to save
}

// restoreCaches renders each cache's keys and unpacks what the
// orchestrator finds into the workspace, saying in the setup log what was
// restored from where, or that nothing was. A failed restore is a warning
// (the steps run without the cache); a key that cannot be rendered fails
// the job.
func (e *Execution) restoreCaches(js *jobState) []restoredCache {
	out := make([]restoredCache, len(e.job.Caches))
	ct, _ := e.job.Transfer.(CacheTransfer)
	if len(e.job.Caches) == 0 || js.failed || e.isCancelled() {
		return out
	}
	if ct == nil {
		js.setup.notice("warning: caches: this agent cannot reach the orchestrator's caches; the steps run without them")
		return out
	}
	env := &evalEnv{contexts: e.contexts(js, js.env), status: js.status(), hashFiles: hashFilesIn(js.ws.dir)}
	for i, c := range e.job.Caches {
		key, restoreKeys, err := renderCacheKeys(c, env)
		if err != nil {
			js.setup.notice("cache %q: key: %v", c.Key, err)
			js.fail(fmt.Sprintf("cache %q: key: %v", c.Key, err))
			return out
		}
		out[i].key = key
		body, hit, ok, err := ct.RestoreCache(e.stopCtx, key, restoreKeys)
		switch {
		case err != nil:
			js.setup.notice("warning: cache %q: restore failed: %v", key, err)
			continue
		case !ok:
			js.setup.notice("cache %q: no cache found (searched %s)", key, hit.Searched)
			continue
		}
		files, size, err := tarball.Unpack(body, js.ws.dir)
		body.Close()
		if err != nil {
			js.setup.notice("warning: cache %q: unpacking the cache %q from %s failed: %v", key, hit.Key, hit.Scope, err)
			continue
		}
		how := "a restore key's prefix"
		if hit.Exact {
			how, out[i].exact = "exact match", true
		}
		js.setup.notice("cache %q: restored %q from %s (%s): %d files (%s)", key, hit.Key, hit.Scope, how, files, formatBytes(size))
	}
	return out
}

func renderCacheKeys(c Cache, env *evalEnv) (string, []string, error) {
	key, err := renderTemplate(c.Key, env)
	if err == nil && strings.TrimSpace(key) == "" {
		err = errors.New("renders empty")
	}
	if err != nil {
		return "", nil, err
	}
	var restore []string
	for _, rk := range c.RestoreKeys {
		s, err := renderTemplate(rk, env)
		if err != nil {
			return "", nil, fmt.Errorf("restore key %q: %v", rk, err)
		}
		if s != "" {
			restore = append(restore, s)
		}
	}
	return key, restore, nil
}

// saveCaches packs and saves each cache the job did not restore exactly,
// when the job succeeded. A failed save is a warning: the job's result
// stands.
func (e *Execution) saveCaches(js *jobState, restored []restoredCache) {
	ct, _ := e.job.Transfer.(CacheTransfer)
	if ct == nil || len(e.job.Caches) == 0 || e.isForced() {
		return
	}
	for i, c := range e.job.Caches {
		key := restored[i].key
		switch {
		case key == "":
			continue // never restored: the job failed before
		case js.status() != kiln.ResultSuccess || js.timedOut:
			js.setup.notice("cache %q: not saved: the job did not succeed", key)
			continue
		case restored[i].exact:
			js.setup.notice("cache %q: not saved: it was restored from an exact match", key)
			continue
		}
		files, unmatched, err := collect(js.ws.dir, c.Paths)
		for _, p := range unmatched {
			js.setup.notice("warning: cache %q: path %q matched no file", key, p)
		}
		if err == nil && len(files) == 0 {
			js.setup.notice("warning: cache %q: no files to save", key)
			continue
		}
		if err == nil {
			err = e.saveOne(ct, key, js.ws.dir, files)
		}
		switch {
		case errors.Is(err, ErrCacheTaken):
			js.setup.notice("cache %q: not saved: another job saved this key first (keys are never overwritten)", key)
		case err != nil:
			js.setup.notice("warning: cache %q: save failed: %v", key, err)
		default:
			js.setup.notice("cache %q: saved (%d files)", key, len(files))
		}
	}
}

func (e *Execution) saveOne(ct CacheTransfer, key, dir string, files []string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tarball.Pack(pw, dir, files)) }()
	err := ct.SaveCache(e.stopCtx, key, pr)
	pr.CloseWithError(errors.New("save ended"))
	return err
}
