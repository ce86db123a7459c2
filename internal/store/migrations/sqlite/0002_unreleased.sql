-- The schema changes of the next release (SQLite). Each feature appends
-- its own block under a header naming it; docs/store.md explains every column.

-- Sweep state in the database, not in a server's memory (a restart or a
-- new leader loses nothing): when a run's graceful cancel was asked (the
-- engine forces it after runs.cancel_grace), and since when no known agent
-- could run a queued job (failed unroutable after queue.unroutable_grace;
-- cleared when one can, and whenever the job enters the queue again).
ALTER TABLE runs ADD COLUMN cancel_requested_at BIGINT;
ALTER TABLE jobs ADD COLUMN unroutable_since BIGINT;
CREATE INDEX jobs_unroutable ON jobs (unroutable_since) WHERE status = 'queued' AND unroutable_since IS NOT NULL;

-- sources.secret: nothing ever set it; a source's secrets are in its config.
ALTER TABLE sources DROP COLUMN secret;

-- Admin tokens and roles (issue 12): a read-only role beside admin, who
-- created a token, and the token a rotation replaced it with (its
-- revoked_at may then lie in the future: the grace period).
ALTER TABLE admin_tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE admin_tokens ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE admin_tokens ADD COLUMN replaced_by TEXT;

-- Fork pull requests (issue 12): each source's policy for pull requests
-- from forks (approve, run or deny) and the mandatory agent labels their
-- jobs may use; a run held for an admin's approval says why, and who
-- approved it and when.
ALTER TABLE sources ADD COLUMN fork_pull_requests TEXT NOT NULL DEFAULT 'approve';
ALTER TABLE sources ADD COLUMN fork_labels TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN approval_reason TEXT;
ALTER TABLE runs ADD COLUMN approved_by TEXT;
ALTER TABLE runs ADD COLUMN approved_at BIGINT;
