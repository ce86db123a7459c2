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
