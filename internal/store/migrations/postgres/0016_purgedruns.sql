-- Runs the garbage collector purged (issue 15): every server sharing the
-- database removes its own log files of the runs listed here (retention's
-- local pass) — and only of those, so a server pointed at the wrong
-- database never deletes logs it cannot account for. Written in the
-- transaction that deletes the run; the leader deletes a row 30 days
-- after the purge.
--   run_id     the purged run
--   purged_at  when it was purged (ms since the epoch)
CREATE TABLE purged_runs (
    run_id    TEXT PRIMARY KEY,
    purged_at BIGINT NOT NULL
);
CREATE INDEX purged_runs_at ON purged_runs (purged_at);
