-- Since when no known agent accepts a queue key, one row per such key,
-- instead of a mark on every queued job of it (jobs.unroutable_since): the
-- leader's sweep marked new jobs and cleared old marks with statements that
-- walked every queued job of a lost key once a second (103 ms a sweep with
-- 10,240 such jobs on PostgreSQL, growing with the backlog). A queued job is
-- unroutable since the later of its key's row and its own queued_at, which
-- every move into the queue sets, so a job entering the queue again still
-- starts its grace over. The marks already kept carry over as each key's
-- earliest one.
CREATE TABLE lost_queue_keys (
    queue_key TEXT PRIMARY KEY,
    since BIGINT NOT NULL
);
INSERT INTO lost_queue_keys (queue_key, since)
    SELECT queue_key, MIN(unroutable_since) FROM jobs
    WHERE status = 'queued' AND unroutable_since IS NOT NULL AND queue_key IS NOT NULL
    GROUP BY queue_key;
DROP INDEX jobs_unroutable;
ALTER TABLE jobs DROP COLUMN unroutable_since;
