package store

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"
)

// Caches records the caches jobs saved: one row per key in a repository's
// scope, written when the save completed (the body is in the storage
// backend under StorageKey). Keys are immutable: the first save wins.
type Caches struct{ h handle }

// Caches is the accessor for saved caches.
func (db *DB) Caches() Caches { return Caches{h: handle{db: db}} }

// Cache is one saved cache.
type Cache struct {
	Namespace  string // the source and repository it belongs to
	Scope      string // refs/heads/x, refs/pull/N or refs/tags/t
	Key        string
	StorageKey string
	Size       int64
	CreatedAt  time.Time
	AccessedAt time.Time
}

// JobRun is what the caches of a job depend on: its run's source,
// repository and event (JSON).
type JobRun struct {
	RunID, Source, Repository string
	Event                     []byte
}

// JobRun returns the run a job belongs to; ErrNotFound if the job is gone.
func (c Caches) JobRun(ctx context.Context, jobID string) (JobRun, error) {
	var jr JobRun
	var ev string
	err := c.h.reader().queryRow(ctx, `SELECT r.id, r.source, r.repository, r.event FROM jobs j JOIN runs r ON r.id = j.run_id
		WHERE j.id = ?`, jobID).Scan(&jr.RunID, &jr.Source, &jr.Repository, &ev)
	if isNoRows(err) {
		return jr, notFound("no job %s", jobID)
	}
	jr.Event = []byte(ev)
	return jr, err
}

const cacheCols = "namespace, scope, cache_key, storage_key, size, created_at, accessed_at FROM caches"

// Exact returns the cache saved under key in a scope (false if none).
func (c Caches) Exact(ctx context.Context, namespace, scope, key string) (Cache, bool, error) {
	return c.one(ctx, "SELECT "+cacheCols+" WHERE namespace = ? AND scope = ? AND cache_key = ?", namespace, scope, key)
}

// Prefixed returns the most recently saved cache of a scope whose key
// starts with prefix (false if none).
func (c Caches) Prefixed(ctx context.Context, namespace, scope, prefix string) (Cache, bool, error) {
	// substr counts characters on both dialects; LIKE would need escaping
	// and is case-insensitive on SQLite.
	return c.one(ctx, "SELECT "+cacheCols+` WHERE namespace = ? AND scope = ? AND substr(cache_key, 1, ?) = ?
		ORDER BY created_at DESC, cache_key DESC LIMIT 1`, namespace, scope, utf8.RuneCountInString(prefix), prefix)
}

func (c Caches) one(ctx context.Context, q string, args ...any) (Cache, bool, error) {
	out, err := c.query(ctx, q, args...)
	if err != nil || len(out) == 0 {
		return Cache{}, false, err
	}
	return out[0], true, nil
}

// Record stores a saved cache unless its key is taken in its scope: it
// reports whether this save won (false: an earlier one keeps the key).
func (c Caches) Record(ctx context.Context, cc Cache) (bool, error) {
	if cc.Namespace == "" || cc.Scope == "" || cc.Key == "" || cc.StorageKey == "" {
		return false, invalid("cache %q is incomplete", cc.Key)
	}
	var won bool
	err := c.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, `INSERT INTO caches (namespace, scope, cache_key, storage_key, size, created_at, accessed_at)
			VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (namespace, scope, cache_key) DO NOTHING`,
			cc.Namespace, cc.Scope, cc.Key, cc.StorageKey, cc.Size, ms(t.now), ms(t.now))
		if err != nil {
			return fmt.Errorf("record cache: %w", err)
		}
		n, err := res.RowsAffected()
		won = n == 1
		return err
	})
	return won, err
}

// Touch records that a cache was restored at now (its TTL runs from
// there).
func (c Caches) Touch(ctx context.Context, cc Cache) error {
	return c.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "UPDATE caches SET accessed_at = ? WHERE namespace = ? AND scope = ? AND cache_key = ? AND accessed_at < ?",
			ms(t.now), cc.Namespace, cc.Scope, cc.Key, ms(t.now))
		return err
	})
}

// OverCap returns, least recently used first, the caches of a namespace
// beyond the most recently used ones whose sizes add up to at most
// maxBytes: what caches.max_bytes evicts.
func (c Caches) OverCap(ctx context.Context, namespace string, maxBytes int64) ([]Cache, error) {
	all, err := c.query(ctx, "SELECT "+cacheCols+" WHERE namespace = ? ORDER BY accessed_at DESC, created_at DESC", namespace)
	if err != nil {
		return nil, err
	}
	var total int64
	for i, cc := range all {
		total += cc.Size
		if total > maxBytes {
			over := all[i:]
			for l, r := 0, len(over)-1; l < r; l, r = l+1, r-1 {
				over[l], over[r] = over[r], over[l]
			}
			return over, nil
		}
	}
	return nil, nil
}

// Unused returns up to limit caches last used before cutoff, oldest
// first: what retention.caches deletes.
func (c Caches) Unused(ctx context.Context, cutoff time.Time, limit int) ([]Cache, error) {
	return c.query(ctx, "SELECT "+cacheCols+" WHERE accessed_at < ? ORDER BY accessed_at LIMIT ?", ms(cutoff), limit)
}

// Delete removes a cache's row if it still points at the same object (a
// save that won the key since is kept).
func (c Caches) Delete(ctx context.Context, cc Cache) error {
	return c.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "DELETE FROM caches WHERE namespace = ? AND scope = ? AND cache_key = ? AND storage_key = ?",
			cc.Namespace, cc.Scope, cc.Key, cc.StorageKey)
		return err
	})
}

func (c Caches) query(ctx context.Context, q string, args ...any) ([]Cache, error) {
	rows, err := c.h.reader().query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read caches: %w", err)
	}
	defer rows.Close()
	var out []Cache
	for rows.Next() {
		var cc Cache
		var created, accessed int64
		if err := rows.Scan(&cc.Namespace, &cc.Scope, &cc.Key, &cc.StorageKey, &cc.Size, &created, &accessed); err != nil {
			return nil, err
		}
		cc.CreatedAt, cc.AccessedAt = time.UnixMilli(created).UTC(), time.UnixMilli(accessed).UTC()
		out = append(out, cc)
	}
	return out, rows.Err()
}
