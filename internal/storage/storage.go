package storage

import (
	"context"
	"errors"
	"io"
	"maps"
	"time"
)

// Backend stores objects: a body of any size, streamed in and out, under a
// key, with a little user metadata and an ETag. Every method is safe for
// concurrent use. A key is checked by CheckKey and metadata by CheckMeta
// before a backend acts on it; a bad one is an error wrapping
// ErrInvalidKey or ErrInvalidMeta.
//
// Keys do not nest: no key is another key followed by "/" and more (a
// store on a POSIX filesystem keeps "a" as a file and then cannot hold
// "a/b"). Consumers lay their keys out so; a backend may refuse a put
// that would nest.
//
// Writes are atomic: a reader sees a whole object, old or new, never a
// torn one, and never a body with another write's metadata. Of two puts of
// one key the last to complete wins.
type Backend interface {
	// Put stores body under key with meta, replacing any object there. The
	// body is streamed: a backend holds a bounded part of it in memory,
	// never the whole. It returns the stored object's Head (without Meta).
	Put(ctx context.Context, key string, body io.Reader, meta Meta) (Object, error)
	// Get opens key's body and returns its Head with it; the caller closes
	// the body. A missing key is ErrNotFound.
	Get(ctx context.Context, key string) (io.ReadCloser, Object, error)
	// Head returns key's size, ETag and metadata; ErrNotFound if missing.
	Head(ctx context.Context, key string) (Object, error)
	// UpdateMeta replaces key's metadata, leaving the body as it is, if
	// the object still has the given ETag (any ETag when etag is ""). It
	// returns false, and changes nothing, when the object is missing or was
	// replaced since that ETag was read: the newer object keeps its own
	// body and metadata.
	UpdateMeta(ctx context.Context, key string, meta Meta, etag string) (bool, error)
	// List returns up to limit objects whose keys start with prefix (which
	// need not end at a "/"), in byte order of their keys, starting after
	// the key after ("" for the first page), and whether more follow (a
	// page may be shorter than limit even then, never empty). The objects
	// carry no Meta.
	List(ctx context.Context, prefix, after string, limit int) ([]Object, bool, error)
	// Delete removes key; deleting a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// PresignGet returns a URL that downloads key with a plain HTTP GET
	// until ttl has passed, so a client that holds no storage credentials
	// (an agent) can fetch it. ErrUnsupported when this backend cannot.
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
	// PresignPut is PresignGet for an upload with a plain HTTP PUT of the
	// body. Metadata cannot travel with it: set it afterwards with
	// UpdateMeta (etag "").
	PresignPut(ctx context.Context, key string, ttl time.Duration) (string, error)
}

// Object describes a stored object.
type Object struct {
	Key  string
	Size int64
	// ETag identifies this version of the object. It is opaque: compare it
	// only for equality. A put of a different body always changes it; a
	// metadata update may or may not.
	ETag string
	// Modified is when the object (its body or its metadata) was last
	// written, by the backend's clock.
	Modified time.Time
	Meta     Meta // from Head and Get only
}

// Meta is an object's user metadata: lower-case keys of letters, digits
// and dashes, printable ASCII values (CheckMeta). Backends keep it as it
// is given; the keys below have a meaning for every consumer.
type Meta map[string]string

// Metadata keys with a common meaning, as RFC 3339 UTC times (FormatTime).
const (
	MetaCreatedAt      = "created-at"       // when the body was stored
	MetaLastAccessedAt = "last-accessed-at" // when it was last stored, read or touched
)

// Clone returns a copy of m that the caller may change (never nil).
func (m Meta) Clone() Meta {
	out := make(Meta, len(m)+2)
	maps.Copy(out, m)
	return out
}

// Errors every backend returns, wrapped; test them with errors.Is.
var (
	ErrNotFound    = errors.New("storage: no such object")
	ErrInvalidKey  = errors.New("storage: invalid key")
	ErrInvalidMeta = errors.New("storage: invalid metadata")
	ErrUnsupported = errors.New("storage: not supported by this backend")
)
