-- jobs_queue_expiry holds only the queued jobs that can expire, as on
-- PostgreSQL (see its 0023): there, an index on every queued job let a
-- planner with stale statistics serve the claim from it. SQLite plans
-- without statistics, but the index is smaller and the schemas stay alike;
-- the expiry sweep's `expires_at <= ?` implies its predicate.
DROP INDEX jobs_queue_expiry;
CREATE INDEX jobs_queue_expiry ON jobs (expires_at) WHERE status = 'queued' AND expires_at IS NOT NULL;
