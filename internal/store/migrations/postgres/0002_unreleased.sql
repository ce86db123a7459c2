-- Admin tokens and roles (issue 12): a read-only role beside admin, who
-- created a token, and the token a rotation replaced it with (its
-- revoked_at may then lie in the future: the grace period).
ALTER TABLE admin_tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE admin_tokens ADD COLUMN created_by TEXT NOT NULL DEFAULT '';
ALTER TABLE admin_tokens ADD COLUMN replaced_by TEXT;
