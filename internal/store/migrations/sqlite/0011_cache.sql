-- Caches (issue 15): one row per saved cache. A cache belongs to a
-- repository (namespace: the source and the repository's owner/name) and a
-- scope (the branch, pull request or tag it was saved from: refs/heads/x,
-- refs/pull/7, refs/tags/v1); its key is unique there and never
-- overwritten (the first save wins). The body lives in the storage backend.
--   namespace, scope, cache_key   where the cache is and its name
--   storage_key   the object's key in the storage backend
--   size          the stored (compressed) size in bytes
--   created_at    when the save completed (ms since the epoch)
--   accessed_at   when it was last saved or restored: retention.caches and
--                 the caches.max_bytes eviction go by it
CREATE TABLE caches (
    namespace   TEXT NOT NULL,
    scope       TEXT NOT NULL,
    cache_key   TEXT NOT NULL,
    storage_key TEXT NOT NULL,
    size        BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    accessed_at BIGINT NOT NULL,
    PRIMARY KEY (namespace, scope, cache_key)
);
CREATE INDEX caches_accessed ON caches (accessed_at);
CREATE INDEX caches_namespace_accessed ON caches (namespace, accessed_at);

-- Uploads in flight (issue 15, the cache-upload settle): one row per cache
-- or artifact upload a server is streaming into storage for a job, deleted
-- when it ends. A job's success waits for its rows (at most
-- caches.upload_settle_timeout) before its dependents are released, on
-- whichever server the success arrives: the row is in the database, not in
-- the memory of the server the upload went to.
--   id          the upload's random id
--   job_id      the job that started it
--   kind        cache | artifact
--   name        the cache key or artifact name, for messages
--   started_at  ms since the epoch (rows of a crashed server are dropped by
--               the retention sweep once they are older than an hour)
CREATE TABLE uploads_in_flight (
    id         TEXT PRIMARY KEY,
    job_id     TEXT NOT NULL,
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL,
    started_at BIGINT NOT NULL
);
CREATE INDEX uploads_in_flight_job ON uploads_in_flight (job_id);
