-- Dashboard sessions (issue 18): a browser that logged in with an admin or
-- read-only token holds a random session id in a cookie; the database keeps
-- only its SHA-256, so every server sharing the database honours it and a
-- copy of the database logs nobody in. A session ends at expires_at, at
-- logout, or when its token is revoked or expires (the lookup joins
-- admin_tokens and checks it each time).
--   id_hash     SHA-256 (hex) of the cookie's session id
--   token_id    the admin_tokens row the session was opened with
--   csrf        the session's anti-forgery token, echoed by every form
--   created_at  when the login happened (ms since the epoch)
--   expires_at  when the session ends (ms)
CREATE TABLE dashboard_sessions (
    id_hash    TEXT PRIMARY KEY,
    token_id   TEXT NOT NULL,
    csrf       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX dashboard_sessions_token ON dashboard_sessions (token_id);
CREATE INDEX dashboard_sessions_expires ON dashboard_sessions (expires_at);

-- A source whose status badges anyone may fetch (/badge/{source}/{workflow}.svg).
ALTER TABLE sources ADD COLUMN public_badges INTEGER NOT NULL DEFAULT 0;
