-- Several coordinators on one database (issue 13).
--
-- coordinators: one row per running server process, written at start and
-- on every cluster heartbeat, deleted at a clean stop. id is random per
-- process start (a restarted server is a new coordinator); advertise_url is
-- where agents reach it (cluster.advertise_url, default public_url), listed
-- to agents in register.ack so they fail over; heartbeat_at is when it last
-- wrote its row: one silent for cluster.dead_after is dead, and the leader
-- hands its agents' jobs to the recovery window.
CREATE TABLE coordinators (
    id            TEXT PRIMARY KEY,
    advertise_url TEXT NOT NULL DEFAULT '',
    started_at    BIGINT NOT NULL,
    heartbeat_at  BIGINT NOT NULL
);

-- agents.coordinator_id: the coordinator the agent is (or was last)
-- connected to; with connected = 1, the holder of the agent id across the
-- cluster (AGENT_ID_IN_USE), and whose death puts the agent's jobs into
-- recovery.
ALTER TABLE agents ADD COLUMN coordinator_id TEXT NOT NULL DEFAULT '';
