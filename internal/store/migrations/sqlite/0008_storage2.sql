-- Artifacts (issue 15): the files a job uploaded, one row per artifact of
-- a run. The body lives in the storage backend under storage_key; the row
-- is written when the upload completed, so a listed artifact can be read.
--   run_id, name   the run and the artifact's name, unique in the run
--   job_id         the job (attempt-independent id) that uploaded it
--   storage_key    the object's key in the storage backend
--   size           the stored (compressed) size in bytes
--   files          how many files it holds
--   created_at     when the upload completed (ms since the epoch)
CREATE TABLE artifacts (
    run_id      TEXT NOT NULL,
    name        TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    storage_key TEXT NOT NULL,
    size        BIGINT NOT NULL,
    files       BIGINT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (run_id, name)
);
CREATE INDEX artifacts_job ON artifacts (job_id);
CREATE INDEX artifacts_created ON artifacts (created_at);
