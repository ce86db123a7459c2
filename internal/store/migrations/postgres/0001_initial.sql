-- kiln's first schema (PostgreSQL). Times are unix milliseconds; JSON is TEXT;
-- booleans are INTEGER 0/1. docs/store.md explains every table and index.

CREATE TABLE workflow_definitions (
    hash       TEXT PRIMARY KEY,
    content    TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE runs (
    id             TEXT PRIMARY KEY,
    number         BIGINT NOT NULL,
    source         TEXT NOT NULL DEFAULT '',
    repository     TEXT NOT NULL DEFAULT '',
    workflow       TEXT NOT NULL,
    workflow_file  TEXT NOT NULL DEFAULT '',
    workflow_hash  TEXT NOT NULL DEFAULT '',
    event          TEXT NOT NULL DEFAULT '{}',
    inputs         TEXT NOT NULL DEFAULT '{}',
    trace          TEXT NOT NULL DEFAULT '[]',
    ref            TEXT NOT NULL DEFAULT '',
    sha            TEXT NOT NULL DEFAULT '',
    status         TEXT NOT NULL,
    cancel_reason  TEXT,
    failure_reason TEXT,
    deadline       BIGINT,
    parent_run_id  TEXT,
    rerun_of       TEXT,
    delivery_id    BIGINT,
    created_at     BIGINT NOT NULL,
    started_at     BIGINT,
    finished_at    BIGINT,
    updated_at     BIGINT NOT NULL
);
CREATE UNIQUE INDEX runs_number ON runs (number);
CREATE INDEX runs_status ON runs (status, number);
CREATE INDEX runs_workflow ON runs (workflow, number);
CREATE INDEX runs_repository ON runs (repository, number);
CREATE INDEX runs_deadline ON runs (deadline) WHERE deadline IS NOT NULL AND status IN ('pending', 'running', 'cancelling');

CREATE TABLE jobs (
    id                      TEXT PRIMARY KEY,
    run_id                  TEXT NOT NULL REFERENCES runs (id),
    idx                     INTEGER NOT NULL,
    name                    TEXT NOT NULL,
    base                    TEXT NOT NULL,
    matrix                  TEXT NOT NULL DEFAULT '{}',
    status                  TEXT NOT NULL,
    ready                   INTEGER NOT NULL DEFAULT 0,
    has_dependents          INTEGER NOT NULL DEFAULT 0,
    max_parallel            INTEGER NOT NULL DEFAULT 0,
    fail_fast               INTEGER NOT NULL DEFAULT 0,
    on_agent_lost           TEXT NOT NULL DEFAULT 'retry',
    spec                    TEXT NOT NULL DEFAULT '{}',
    queue_key               TEXT NOT NULL DEFAULT '',
    queued_at               BIGINT,
    expires_at              BIGINT,
    pending_reason          TEXT,
    pending_since           BIGINT,
    last_provisioning_error TEXT,
    agent_id                TEXT,
    lease_epoch             BIGINT NOT NULL DEFAULT 0,
    attempts                INTEGER NOT NULL DEFAULT 0,
    lost_count              INTEGER NOT NULL DEFAULT 0,
    dispatched_at           BIGINT,
    ack_deadline            BIGINT,
    started_at              BIGINT,
    last_heartbeat_at       BIGINT,
    recovery_deadline       BIGINT,
    stop                    INTEGER NOT NULL DEFAULT 0,
    outputs                 TEXT,
    result                  TEXT,
    error                   TEXT,
    created_at              BIGINT NOT NULL,
    finished_at             BIGINT,
    updated_at              BIGINT NOT NULL
);
-- Every index on jobs costs each status change (PostgreSQL writes an entry
-- in every index for an update that is not HOT), so there are few: one for
-- everything scoped to a run, and partial ones holding only the rows a hot
-- path or sweep acts on. Job names are unique per run; the store checks it
-- when the run is created.
CREATE INDEX jobs_run ON jobs (run_id, base, status);
-- The claim takes the oldest queued jobs of a key in the order of this
-- index, written (id || '') rather than id: the same order, but one the
-- primary key cannot serve. Ordered by plain id, PostgreSQL planning from
-- statistics taken while most jobs were queued walked the primary key
-- instead, through every finished job (ids are time-ordered, so those come
-- first), on every claim: kiln bench saw 1,400 jobs/s fall to 300.
CREATE INDEX jobs_queued ON jobs (queue_key, (id || '')) WHERE status = 'queued';
CREATE INDEX jobs_queue_expiry ON jobs (expires_at) WHERE status = 'queued';
CREATE INDEX jobs_ack ON jobs (ack_deadline) WHERE status = 'dispatched';
CREATE INDEX jobs_recovery ON jobs (recovery_deadline) WHERE status = 'recovering';
CREATE INDEX jobs_heartbeat ON jobs (last_heartbeat_at) WHERE status IN ('running', 'cancelling');

CREATE TABLE needs (
    job_id   TEXT NOT NULL REFERENCES jobs (id),
    run_id   TEXT NOT NULL,
    upstream TEXT NOT NULL,
    accept   TEXT NOT NULL,
    PRIMARY KEY (job_id, upstream)
);
CREATE INDEX needs_upstream ON needs (run_id, upstream);

CREATE TABLE steps (
    job_id      TEXT NOT NULL REFERENCES jobs (id),
    idx         INTEGER NOT NULL,
    name        TEXT NOT NULL,
    status      TEXT NOT NULL,
    exit_code   INTEGER,
    error       TEXT,
    started_at  BIGINT,
    finished_at BIGINT,
    PRIMARY KEY (job_id, idx)
);

CREATE TABLE delivery_dedup (
    source      TEXT NOT NULL,
    delivery_id TEXT NOT NULL,
    expires_at  BIGINT NOT NULL,
    PRIMARY KEY (source, delivery_id)
);
CREATE INDEX delivery_dedup_expiry ON delivery_dedup (expires_at);

CREATE TABLE deliveries (
    id           BIGSERIAL PRIMARY KEY,
    source       TEXT NOT NULL,
    delivery_id  TEXT NOT NULL,
    event        TEXT NOT NULL DEFAULT '',
    headers      TEXT NOT NULL DEFAULT '{}',
    body         BYTEA,
    status       TEXT NOT NULL,
    message      TEXT NOT NULL DEFAULT '',
    run_ids      TEXT NOT NULL DEFAULT '[]',
    received_at  BIGINT NOT NULL,
    processed_at BIGINT,
    claimed_by   TEXT,
    claim_until  BIGINT,
    attempts     INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX deliveries_received ON deliveries (id) WHERE status = 'received';
CREATE INDEX deliveries_source ON deliveries (source, id);

CREATE TABLE agents (
    id            TEXT PRIMARY KEY,
    labels        TEXT NOT NULL DEFAULT '',
    mandatory     TEXT NOT NULL DEFAULT '',
    token_id      TEXT NOT NULL DEFAULT '',
    hostname      TEXT NOT NULL DEFAULT '',
    version       TEXT NOT NULL DEFAULT '',
    connected     INTEGER NOT NULL DEFAULT 0,
    registered_at BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL
);

CREATE TABLE agent_tokens (
    id           TEXT PRIMARY KEY,
    hash         TEXT NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    name         TEXT NOT NULL DEFAULT '',
    labels       TEXT,
    mandatory    TEXT NOT NULL DEFAULT '',
    single_use   INTEGER NOT NULL DEFAULT 0,
    created_by   TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT,
    consumed_at  BIGINT,
    last_used_at BIGINT
);

CREATE TABLE admin_tokens (
    id           TEXT PRIMARY KEY,
    hash         TEXT NOT NULL UNIQUE,
    prefix       TEXT NOT NULL,
    name         TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT,
    revoked_at   BIGINT,
    last_used_at BIGINT
);

CREATE TABLE sources (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,
    name       TEXT NOT NULL UNIQUE,
    config     TEXT NOT NULL DEFAULT '{}',
    secret     TEXT NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE log_chunks (
    job_id      TEXT NOT NULL,
    step_idx    INTEGER NOT NULL,
    first_seq   BIGINT NOT NULL,
    last_seq    BIGINT NOT NULL,
    byte_offset BIGINT NOT NULL,
    byte_length BIGINT NOT NULL,
    PRIMARY KEY (job_id, step_idx, first_seq)
);

CREATE TABLE log_marks (
    job_id    TEXT NOT NULL,
    step_idx  INTEGER NOT NULL,
    acked_seq BIGINT NOT NULL,
    PRIMARY KEY (job_id, step_idx)
);

CREATE TABLE leases (
    name       TEXT PRIMARY KEY,
    holder     TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

CREATE TABLE cron_fires (
    key           TEXT PRIMARY KEY,
    last_fired_at BIGINT NOT NULL
);

-- Run numbers come from a sequence: coordinators creating runs at once never
-- collide (a rolled-back creation leaves a gap, which is harmless).
CREATE SEQUENCE run_numbers;

-- Cron schedules of the default branches' workflows: replaced whenever a
-- push to a repository's default branch is processed; read by the scheduler.
CREATE TABLE schedules (
    source        TEXT NOT NULL,
    repository    TEXT NOT NULL,
    workflow_file TEXT NOT NULL,
    workflow_hash TEXT NOT NULL,
    cron          TEXT NOT NULL,
    timezone      TEXT NOT NULL,
    branch        TEXT NOT NULL,
    sha           TEXT NOT NULL,
    clone_url     TEXT NOT NULL DEFAULT '',
    registered_at BIGINT NOT NULL,
    PRIMARY KEY (source, repository, workflow_file, cron, timezone)
);
