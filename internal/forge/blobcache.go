package forge

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"strconv"
)

// blobCacheBytes bounds the workflow file contents one source keeps by blob.
const blobCacheBytes = 8 << 20

// blobCache keeps workflow files by their git blob id, as the contents
// API lists them: a push that changes no workflow file lists the directory
// (one forge call) and reads no file again — one round trip less between a
// webhook and its first job, and N fewer calls against the forge's rate
// limit for a directory of N files. A file enters only once its content
// hashes to the id the listing gave, so an entry is always the content of
// that blob, whatever the forge answers later.
type blobCache struct{ lru *sizedLRU[blobKey, []byte] }

type blobKey struct{ repo, id string }

func newBlobCache() *blobCache {
	return &blobCache{lru: newSizedLRU[blobKey, []byte](blobCacheBytes)}
}

// get returns the cached content of repo's blob id (read-only: shared).
func (c *blobCache) get(repo, id string) ([]byte, bool) {
	if c == nil || id == "" {
		return nil, false
	}
	return c.lru.get(blobKey{repo, id})
}

// put keeps content as repo's blob id when it is that blob.
func (c *blobCache) put(repo, id string, content []byte) {
	if c == nil || !isBlob(id, content) {
		return
	}
	c.lru.put(blobKey{repo, id}, content, int64(len(repo)+len(id)+len(content)+64))
}

// isBlob reports whether content is the git blob named id: the SHA-1 (or,
// in a SHA-256 repository, SHA-256) of "blob <size>\x00<content>", in hex.
func isBlob(id string, content []byte) bool {
	switch len(id) {
	case 2 * sha1.Size:
		return blobID(sha1.New(), content) == id
	case 2 * sha256.Size:
		return blobID(sha256.New(), content) == id
	}
	return false
}

// BlobID is content's git blob id in a SHA-1 repository, as the contents
// API lists it (`sha`).
func BlobID(content []byte) string { return blobID(sha1.New(), content) }

func blobID(h hash.Hash, content []byte) string {
	h.Write([]byte("blob " + strconv.Itoa(len(content)) + "\x00"))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}
