package storage

import (
	"context"
	"errors"
	"time"
)

// MetaUpdater is the part of a Backend that Touch needs.
type MetaUpdater interface {
	Head(ctx context.Context, key string) (Object, error)
	UpdateMeta(ctx context.Context, key string, meta Meta, etag string) (bool, error)
}

// Touch records that key was used at now: it reads the object's metadata
// and ETag and writes the metadata back with last-accessed-at = now, on
// the condition that the object still has that ETag. Everything else —
// the body, created-at, other keys — stays as read. It returns false when
// the object is missing or was replaced in between: the newer object has
// its own, fresher metadata, and a touch must never write the older
// version's back over it (B93, B94).
func Touch(ctx context.Context, b MetaUpdater, key string, now time.Time) (bool, error) {
	obj, err := b.Head(ctx, key)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	meta := obj.Meta.Clone()
	meta[MetaLastAccessedAt] = FormatTime(now)
	return b.UpdateMeta(ctx, key, meta, obj.ETag)
}

// Fresh returns a copy of meta stamped as new at now: created-at and
// last-accessed-at both now. Consumers put new objects with it.
func Fresh(meta Meta, now time.Time) Meta {
	out := meta.Clone()
	out[MetaCreatedAt] = FormatTime(now)
	out[MetaLastAccessedAt] = FormatTime(now)
	return out
}

// FormatTime writes t as metadata: RFC 3339 in UTC, to the nanosecond.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseTime reads a time FormatTime wrote.
func ParseTime(s string) (time.Time, error) { return time.Parse(time.RFC3339Nano, s) }
