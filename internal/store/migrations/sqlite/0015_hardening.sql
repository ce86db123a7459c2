-- The cluster's agent list (issue 13): every server shows every agent with
-- its job slots, so the registration records how many jobs the agent takes
-- at once. 0: not known (a row from before this migration, until the
-- agent registers again).
ALTER TABLE agents ADD COLUMN max_jobs INTEGER NOT NULL DEFAULT 0;
