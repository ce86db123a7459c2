-- jobs_queue_expiry holds only the queued jobs that can expire. Its
-- predicate was every queued job's, so PostgreSQL could read it whole for
-- the claim — and did, with statistics taken while no job was queued (a
-- burst after a quiet spell, or a new install's first one: status =
-- 'queued' then looks rare): the claim scanned every queued job of every
-- key and sorted them, 10 ms a claim with 10,000 queued, where the ordered
-- scan of its key in jobs_queued reads the 32 it takes. The claim also
-- takes jobs that never expire, so this index can no longer serve it; the
-- expiry sweep's `expires_at <= ?` implies its predicate.
DROP INDEX jobs_queue_expiry;
CREATE INDEX jobs_queue_expiry ON jobs (expires_at) WHERE status = 'queued' AND expires_at IS NOT NULL;
