-- Fork pull requests (issue 12): each source's policy for pull requests
-- from forks (approve, run or deny) and the mandatory agent labels their
-- jobs may use; a run held for an admin's approval says why, and who
-- approved it and when.
ALTER TABLE sources ADD COLUMN fork_pull_requests TEXT NOT NULL DEFAULT 'approve';
ALTER TABLE sources ADD COLUMN fork_labels TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN approval_reason TEXT;
ALTER TABLE runs ADD COLUMN approved_by TEXT;
ALTER TABLE runs ADD COLUMN approved_at BIGINT;
