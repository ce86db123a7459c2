-- The event scaler (issue 14): claim codes of the scale-up webhooks it
-- sends. Only a code's SHA-256 is stored; `kiln agent --claim CODE`
-- exchanges the code, once and before it expires, for the spawn's
-- ephemeral agent token. docs/store.md explains every column.

-- scaler_claims: one row per scale-up webhook (per event spawn).
--   hash          SHA-256 (hex) of the claim code; the code itself is never stored
--   agent_id      the spawn it is for (scaler_spawns.agent_id)
--   scaler        the scaler's name
--   server_url    the URL the provisioned agent dials, returned on redemption
--   created_at    when the webhook was sent
--   expires_at    the code cannot be redeemed from then on (created_at + claim_ttl)
--   consumed_at   when it was redeemed (NULL: not yet); a code is redeemed once
--   deadline      the leader's reaper fails the spawn if its agent has not registered by then
--                 (expires_at, moved to redemption + claim_ttl once redeemed)
CREATE TABLE scaler_claims (
    hash        TEXT PRIMARY KEY,
    agent_id    TEXT NOT NULL UNIQUE,
    scaler      TEXT NOT NULL,
    server_url  TEXT NOT NULL DEFAULT '',
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    consumed_at BIGINT,
    deadline    BIGINT NOT NULL
);
CREATE INDEX scaler_claims_deadline ON scaler_claims (deadline);
