-- Pending reasons per routing key (issue 17): why the queued jobs of a key
-- wait ("all 100 matching agents are busy") is one row, decided by a
-- dispatcher, instead of the same words rewritten into every queued job's
-- row (a queue of 5,000 jobs cost 5,000 row rewrites, each copying the
-- job's spec, whenever the reason changed or a run was queued). A queued
-- job shows its key's reason when that was decided after the job's own
-- last change (jobs.updated_at); its own reason (the one it was queued
-- with, a provisioning error) otherwise.
CREATE TABLE key_reasons (
    rkey    TEXT PRIMARY KEY, -- jobs.queue_key
    reason  TEXT NOT NULL,
    since   INTEGER NOT NULL, -- when this reason was first decided for the key
    decided INTEGER NOT NULL  -- when it was last decided
);
