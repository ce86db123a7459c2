package store

import (
	"context"
	"crypto/subtle"
	"database/sql"
)

// Agent identity: an agent id is bound, at its first registration, to a
// secret the agent keeps in its state directory (only the SHA-256 is
// stored, in agents.secret_hash). A process that knows the id and holds a
// token, even the same shared token, cannot register the id without the
// secret: it cannot supersede the live agent, nor take the id of a
// disconnected one. The fleet checks it before it touches the live
// registration (CheckAgentSecret) and binds it in the registration's
// transaction (BindAgentSecret), a compare-and-set that also settles two
// first registrations racing on different servers.

func errAgentIDBound(id string) error {
	return newError(ErrAgentIDBound, "agent id %s belongs to another agent (its secret does not match)", id)
}

// CheckAgentSecret returns ErrAgentIDBound unless secretHash (HashToken of
// the secret the agent sent) is the one id is bound to, or id is not bound.
func (a Auth) CheckAgentSecret(ctx context.Context, id, secretHash string) error {
	var bound sql.NullString
	err := a.h.reader().queryRow(ctx, "SELECT secret_hash FROM agents WHERE id = ?", id).Scan(&bound)
	if isNoRows(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if bound.Valid && subtle.ConstantTimeCompare([]byte(bound.String), []byte(secretHash)) != 1 {
		return errAgentIDBound(id)
	}
	return nil
}

// BindAgentSecret binds id to secretHash, unless it is bound to another
// (ErrAgentIDBound). An id seen for the first time gets its agents row
// here; the registration's UpsertAgent fills it in the same transaction.
func (a Auth) BindAgentSecret(ctx context.Context, id, secretHash string) error {
	if id == "" || secretHash == "" {
		return invalid("an agent id and a secret are needed")
	}
	return a.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		res, err := t.exec(ctx, `INSERT INTO agents (id, secret_hash, registered_at, last_seen_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET secret_hash = excluded.secret_hash
			WHERE agents.secret_hash IS NULL OR agents.secret_hash = excluded.secret_hash`, id, secretHash, now, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return err
			}
			return errAgentIDBound(id)
		}
		return nil
	})
}
