package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// ClaimCodePrefix starts every claim code an event scaler hands out, so a
// leaked one is recognisable.
const ClaimCodePrefix = "kcl_"

// NewClaimCode returns a fresh claim code: 256 random bits.
func NewClaimCode() (string, error) { return newSecret(ClaimCodePrefix) }

// ValidClaimCode reports whether s has the shape of a claim code (a cheap
// refusal before the database is asked).
func ValidClaimCode(s string) bool {
	if !strings.HasPrefix(s, ClaimCodePrefix) || len(s) != len(ClaimCodePrefix)+52 {
		return false
	}
	for _, r := range s[len(ClaimCodePrefix):] {
		if (r < 'a' || r > 'z') && (r < '2' || r > '7') {
			return false
		}
	}
	return true
}

// ScalerClaim is the stored half of an event scaler's claim code.
type ScalerClaim struct {
	Code      string // the secret; only its hash is stored
	AgentID   string
	Scaler    string
	ServerURL string
	ExpiresAt time.Time
}

// AddClaim stores a claim code's hash for a claimed spawn (B148).
func (s Scalers) AddClaim(ctx context.Context, c ScalerClaim) error {
	if c.Code == "" || c.AgentID == "" || c.ExpiresAt.IsZero() {
		return invalid("a claim needs a code, an agent id and an expiry")
	}
	return s.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, `INSERT INTO scaler_claims (hash, agent_id, scaler, server_url, created_at, expires_at, deadline)
			VALUES (?, ?, ?, ?, ?, ?, ?)`, HashToken(c.Code), c.AgentID, c.Scaler, c.ServerURL, ms(t.now), ms(c.ExpiresAt), ms(c.ExpiresAt))
		if err != nil {
			return fmt.Errorf("add claim: %w", err)
		}
		return nil
	})
}

// Redeemed is what a claim code is exchanged for: the spawn's agent id,
// labels and a fresh secret of its ephemeral, single-use token.
type Redeemed struct {
	AgentID   string
	Labels    kiln.Labels
	Mandatory kiln.Labels
	ServerURL string
	Token     string
	ExpiresAt time.Time
}

// errBadClaim is what every refused code gets: a stranger learns nothing
// of which check failed.
func errBadClaim() error {
	return newError(ErrUnauthorized, "invalid, expired or already used claim code")
}

// RedeemClaim exchanges a claim code, once and before it expires, for the
// spawn's agent token (B149): in one transaction the code is marked
// consumed (compare-and-set: of two redemptions one wins), and the secret
// of the spawn's still unused token is replaced by a new one returned
// here, so the token stays bound to the agent id and labels and is revoked
// with the spawn. The reaper's deadline moves to now + the claim's ttl
// (expires_at - created_at): the agent has that long again to register.
func (s Scalers) RedeemClaim(ctx context.Context, code string) (Redeemed, error) {
	var out Redeemed
	if !ValidClaimCode(code) {
		return out, errBadClaim()
	}
	secret, err := newSecret(AgentTokenPrefix)
	if err != nil {
		return out, err
	}
	err = s.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		err := t.queryRow(ctx, `UPDATE scaler_claims SET consumed_at = ?, deadline = ? + (expires_at - created_at)
			WHERE hash = ? AND consumed_at IS NULL AND expires_at > ? RETURNING agent_id, server_url`, now, now, HashToken(code), now).Scan(&out.AgentID, &out.ServerURL)
		if isNoRows(err) {
			return errBadClaim()
		}
		if err != nil {
			return err
		}
		var tokenID string
		err = t.queryRow(ctx, "SELECT token_id FROM scaler_spawns WHERE agent_id = ? AND state = 'spawning'", out.AgentID).Scan(&tokenID)
		if isNoRows(err) {
			return errBadClaim() // the spawn was released meanwhile
		}
		if err != nil {
			return err
		}
		tk, err := scanAgentToken(t.queryRow(ctx, `UPDATE agent_tokens SET hash = ?, prefix = ? WHERE id = ? AND revoked_at IS NULL
			AND consumed_at IS NULL AND (expires_at IS NULL OR expires_at > ?) RETURNING `+agentTokenCols,
			HashToken(secret), displayPrefix(secret, AgentTokenPrefix), tokenID, now))
		if isNoRows(err) {
			return errBadClaim()
		}
		if err != nil {
			return err
		}
		out.Labels, out.Mandatory, out.ExpiresAt, out.Token = tk.Labels, tk.Mandatory, tk.ExpiresAt, secret
		return nil
	})
	if err != nil {
		return Redeemed{}, err
	}
	return out, nil
}

// Unarrived is an event spawn whose agent did not register by its claim's
// deadline.
type Unarrived struct {
	AgentID, Scaler, JobID, RunID, Owner string
	Redeemed                             bool
	Deadline                             time.Time
}

// Unarrived lists up to limit event spawns still not registered past their
// claim's deadline, oldest deadline first (the leader's reaper, B150).
func (s Scalers) Unarrived(ctx context.Context, limit int) ([]Unarrived, error) {
	rows, err := s.h.reader().query(ctx, `SELECT c.agent_id, c.scaler, COALESCE(p.job_id, ''), COALESCE(p.run_id, ''), p.owner,
		c.consumed_at IS NOT NULL, c.deadline FROM scaler_claims c JOIN scaler_spawns p ON p.agent_id = c.agent_id
		WHERE p.state = 'spawning' AND c.deadline <= ? ORDER BY c.deadline LIMIT ?`, ms(s.h.now()), limit)
	if err != nil {
		return nil, fmt.Errorf("unarrived provisions: %w", err)
	}
	defer rows.Close()
	var out []Unarrived
	for rows.Next() {
		var u Unarrived
		var deadline int64
		if err := rows.Scan(&u.AgentID, &u.Scaler, &u.JobID, &u.RunID, &u.Owner, &u.Redeemed, &deadline); err != nil {
			return nil, err
		}
		u.Deadline = time.UnixMilli(deadline).UTC()
		out = append(out, u)
	}
	return out, rows.Err()
}

// ReapUnarrived releases an event spawn whose agent never registered by
// its claim's deadline, if it still has not (compare-and-set: of several
// reapers one wins, and an agent registering meanwhile keeps its spawn):
// the spawn row and claim go, its token is revoked. It reports whether
// this call reaped it.
func (s Scalers) ReapUnarrived(ctx context.Context, agentID string) (bool, error) {
	var ok bool
	err := s.h.write(ctx, func(t *txn) error {
		var token string
		err := t.queryRow(ctx, `DELETE FROM scaler_spawns WHERE agent_id = ? AND state = 'spawning'
			AND EXISTS (SELECT 1 FROM scaler_claims c WHERE c.agent_id = scaler_spawns.agent_id AND c.deadline <= ?)
			RETURNING token_id`, agentID, ms(t.now)).Scan(&token)
		if isNoRows(err) {
			ok = false
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		if _, err := t.exec(ctx, "DELETE FROM scaler_claims WHERE agent_id = ?", agentID); err != nil {
			return err
		}
		if token != "" {
			if _, err := t.exec(ctx, "UPDATE agent_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?", ms(t.now), token); err != nil {
				return err
			}
		}
		_, err = t.exec(ctx, "DELETE FROM agents WHERE id = ? AND connected = 0", agentID)
		return err
	})
	return ok, err
}

// PruneClaims deletes the claims of spawns that are gone (released after
// their agent came and went, or failed): nothing can redeem them any more.
func (s Scalers) PruneClaims(ctx context.Context) (int64, error) {
	var n int64
	err := s.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "DELETE FROM scaler_claims WHERE NOT EXISTS (SELECT 1 FROM scaler_spawns p WHERE p.agent_id = scaler_claims.agent_id)")
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
