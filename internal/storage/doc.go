// Package storage is where kiln keeps blobs that outgrow the database and
// must be readable from every server sharing it: job caches, artifacts and
// finished step logs. It defines the one Backend interface those parts
// program against, the rules every backend follows (keys, metadata, what an
// ETag promises), and the operations built on top of them, such as the
// conditional touch that refreshes a cache entry's last access without ever
// writing an older object back over a newer one.
//
// The backends live in the subpackages fs (a directory on the server's
// disk, the default) and s3 (any S3-compatible object store); storagetest
// holds the conformance suite every backend must pass. Consumers that need
// less than a whole Backend declare their own smaller interface.
package storage
