-- The jobs an agent holds, by agent: an agent's registration sweeps what
-- it held under its id (Queue.AgentLost), and without this index that read
-- walked every job of every active run, in the committer's transaction:
-- 3.9 ms a registration with 10,000 jobs queued on SQLite (kiln bench),
-- and a reconnect storm of a thousand agents paid it a thousand times. The
-- index holds only held jobs (the statuses of the store's `held`, in its
-- order, so both databases see the queries' condition implies it).
CREATE INDEX jobs_agent ON jobs (agent_id) WHERE status IN ('dispatched', 'running', 'cancelling');
