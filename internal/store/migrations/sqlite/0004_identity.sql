-- Agent identity (issue 12): an agent id is bound at its first registration
-- to a per-agent secret the agent keeps in its state directory; only its
-- SHA-256 is stored. NULL: not bound yet (rows from before this migration;
-- the next registration binds them).
ALTER TABLE agents ADD COLUMN secret_hash TEXT;

