-- The scaler (issue 14). Spawns are claimed here, so that with several
-- servers on one database a queued job gets one agent started for it, not
-- one per server; docs/store.md explains every column.

-- scaler_spawns: one row per agent a scaler started (or is starting).
--   agent_id      the agent id the spawned agent registers with (scaler-<type>-<8 hex>)
--   scaler        the scaler's name in the server's configuration
--   job_id        the queued job it was started for (NULL: a warm-pool agent); unique, so one spawn per job
--   run_id        that job's run, for attributing its events
--   labels        the labels the agent registers (its token allows exactly these)
--   owner         the server instance that started it (only it may destroy it)
--   token_id      its ephemeral agent token, revoked when it is destroyed
--   state         spawning | running (registered) | destroying
--   started_at    when the spawn was claimed; registered_at: when the agent registered
CREATE TABLE scaler_spawns (
    agent_id      TEXT PRIMARY KEY,
    scaler        TEXT NOT NULL,
    job_id        TEXT,
    run_id        TEXT,
    labels        TEXT NOT NULL DEFAULT '',
    owner         TEXT NOT NULL,
    token_id      TEXT NOT NULL DEFAULT '',
    state         TEXT NOT NULL DEFAULT 'spawning',
    started_at    BIGINT NOT NULL,
    registered_at BIGINT
);
CREATE UNIQUE INDEX scaler_spawns_job ON scaler_spawns (job_id) WHERE job_id IS NOT NULL;
CREATE INDEX scaler_spawns_scaler ON scaler_spawns (scaler);

-- agent_tokens.agent_id: an ephemeral token made for one spawned agent
-- admits only that agent id (NULL: any id, as before).
ALTER TABLE agent_tokens ADD COLUMN agent_id TEXT;

-- run_events: the run timeline (scaler events so far): one row per event,
-- with the job it concerns (NULL: the run as a whole), when it happened,
-- its type (scaler.provisioning, scaler.network, scaler.ready,
-- scaler.failed, agent.connecting) and a detail sentence.
CREATE TABLE run_events (
    id      INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id  TEXT NOT NULL,
    job_id  TEXT,
    at      BIGINT NOT NULL,
    type    TEXT NOT NULL,
    detail  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX run_events_run ON run_events (run_id, id);
