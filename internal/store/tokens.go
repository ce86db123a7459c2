package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// Auth keeps agent tokens, admin tokens and the agents table. Tokens are
// stored only as their SHA-256 hash and a short display prefix: the secret
// is returned once, at creation.
type Auth struct{ h handle }

// Token prefixes, so a leaked secret is recognisable.
const (
	AgentTokenPrefix = "kat_"
	AdminTokenPrefix = "kadm_"
)

// lastUsedEvery debounces last_used_at writes on authentication.
const lastUsedEvery = time.Minute

// HashToken returns the stored form of a token secret.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func newSecret(prefix string) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return prefix + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// displayPrefix is what listings show of a secret: the kind and 8 random
// characters of a secret kiln made, and at most a quarter of one an
// operator chose (admin_token may be as short as 16 characters).
func displayPrefix(secret, prefix string) string {
	if strings.HasPrefix(secret, prefix) && len(secret) >= len(prefix)+32 {
		return secret[:len(prefix)+8]
	}
	return secret[:min(4, len(secret)/4)]
}

// errBadToken is what every rejected token gets: callers answer 401
// without telling a stranger which check failed.
func errBadToken() error { return newError(ErrUnauthorized, "invalid or expired token") }

// AgentTokenSpec describes an agent token to create.
type AgentTokenSpec struct {
	Name string
	// Labels, when not nil, scopes the token: an agent using it may only
	// register labels within this set.
	Labels kiln.Labels
	// Mandatory are labels every agent using the token carries as mandatory
	// (taints): it only takes jobs asking for all of them.
	Mandatory kiln.Labels
	ExpiresAt time.Time // zero: never
	SingleUse bool      // consumed by its first authentication
	CreatedBy string
	// AgentID, when set, binds the token to one agent id: only an agent
	// registering with that id may use it (a scaler's ephemeral token).
	AgentID string
}

// AgentToken is a stored agent token (never the secret).
type AgentToken struct {
	ID         string
	Prefix     string
	Name       string
	Labels     kiln.Labels // nil: not scoped
	Mandatory  kiln.Labels
	SingleUse  bool
	CreatedBy  string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	RevokedAt  time.Time
	ConsumedAt time.Time
	LastUsedAt time.Time
	AgentID    string // "": any agent id
}

const agentTokenCols = `id, prefix, name, labels, mandatory, single_use, created_by, created_at, expires_at, revoked_at, consumed_at, last_used_at, COALESCE(agent_id, '')`

func scanAgentToken(r interface{ Scan(...any) error }) (AgentToken, error) {
	var tk AgentToken
	var labels sql.NullString
	var mandatory string
	var created, expires, revoked, consumed, used sql.NullInt64
	err := r.Scan(&tk.ID, &tk.Prefix, &tk.Name, &labels, &mandatory, &tk.SingleUse, &tk.CreatedBy,
		&created, &expires, &revoked, &consumed, &used, &tk.AgentID)
	if labels.Valid {
		tk.Labels = kiln.ParseLabelsKey(labels.String)
	}
	tk.Mandatory = kiln.ParseLabelsKey(mandatory)
	tk.CreatedAt, tk.ExpiresAt, tk.RevokedAt = fromMS(created), fromMS(expires), fromMS(revoked)
	tk.ConsumedAt, tk.LastUsedAt = fromMS(consumed), fromMS(used)
	return tk, err
}

// CreateAgentToken stores a new agent token and returns it with its secret,
// which is shown once and never stored.
func (a Auth) CreateAgentToken(ctx context.Context, spec AgentTokenSpec) (AgentToken, string, error) {
	for _, ls := range []kiln.Labels{spec.Labels, spec.Mandatory} {
		if err := kiln.ValidateLabels(ls); err != nil {
			return AgentToken{}, "", err
		}
	}
	secret, err := newSecret(AgentTokenPrefix)
	if err != nil {
		return AgentToken{}, "", err
	}
	id, err := newID()
	if err != nil {
		return AgentToken{}, "", err
	}
	var labels any
	if spec.Labels != nil {
		labels = kiln.NewLabels(spec.Labels...).Key()
	}
	var boundTo any
	if spec.AgentID != "" {
		boundTo = spec.AgentID
	}
	var tk AgentToken
	err = a.h.write(ctx, func(t *txn) error {
		tk, err = scanAgentToken(t.queryRow(ctx, `INSERT INTO agent_tokens (id, hash, prefix, name, labels, mandatory, single_use,
			created_by, created_at, expires_at, agent_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+agentTokenCols,
			id, HashToken(secret), displayPrefix(secret, AgentTokenPrefix), spec.Name, labels,
			kiln.NewLabels(spec.Mandatory...).Key(), boolInt(spec.SingleUse), spec.CreatedBy, ms(t.now), nullMS(spec.ExpiresAt), boundTo))
		return err
	})
	if err != nil {
		return AgentToken{}, "", fmt.Errorf("create agent token: %w", err)
	}
	return tk, secret, nil
}

// AuthenticateAgent returns the token a secret belongs to, or an
// ErrUnauthorized error when it is unknown, revoked, expired or (single-use)
// already consumed. A single-use token is consumed atomically: of two
// agents presenting it at once, one gets in.
func (a Auth) AuthenticateAgent(ctx context.Context, secret string) (AgentToken, error) {
	hash := HashToken(secret)
	var tk AgentToken
	err := a.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		var err error
		tk, err = scanAgentToken(t.queryRow(ctx, `UPDATE agent_tokens SET last_used_at = ?,
			consumed_at = CASE WHEN single_use = 1 THEN ? ELSE consumed_at END
			WHERE hash = ? AND revoked_at IS NULL AND consumed_at IS NULL AND (expires_at IS NULL OR expires_at > ?)
			RETURNING `+agentTokenCols, now, now, hash, now))
		if isNoRows(err) {
			return errBadToken()
		}
		return err
	})
	return tk, err
}

// VerifyAgentToken returns the token a secret belongs to, or an
// ErrUnauthorized error when it is unknown, revoked or expired. Unlike
// AuthenticateAgent it consumes nothing and writes nothing: the
// orchestrator verifies a token when an agent connects and claims it
// (ClaimAgentToken, which records the use) when the agent registers. (A
// write here, of the one row every agent of a shared token reads, queued
// each connecting agent behind the registrations holding that row: 11 ms a
// connect in kiln bench's 100-agent start.) A consumed
// single-use token is returned too (ConsumedAt set): only the registration
// knows the agent id that decides whether it may still be used.
func (a Auth) VerifyAgentToken(ctx context.Context, secret string) (AgentToken, error) {
	now := a.h.now()
	tk, err := scanAgentToken(a.h.reader().queryRow(ctx, `SELECT `+agentTokenCols+` FROM agent_tokens
		WHERE hash = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`, HashToken(secret), ms(now)))
	if isNoRows(err) {
		return AgentToken{}, errBadToken()
	}
	return tk, err
}

// ClaimAgentToken checks, in the transaction that records a registration
// (UpsertAgent), that the token may register agentID: it is neither revoked
// nor expired, and a single-use token is consumed by its first registration
// and from then on admits only the agent that registration recorded (the
// agents row with this token_id), so an ephemeral agent can reconnect after a
// blip but no other agent can use its token; a token bound to an agent id
// (AgentTokenSpec.AgentID) admits that id only. Anything else is
// ErrUnauthorized.
func (a Auth) ClaimAgentToken(ctx context.Context, tokenID, agentID string) (AgentToken, error) {
	var tk AgentToken
	err := a.h.write(ctx, func(t *txn) error {
		now := ms(t.now)
		var err error
		tk, err = scanAgentToken(t.queryRow(ctx, `UPDATE agent_tokens SET last_used_at = ?,
			consumed_at = CASE WHEN single_use = 1 AND consumed_at IS NULL THEN ? ELSE consumed_at END
			WHERE id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)
			AND (agent_id IS NULL OR agent_id = ?)
			AND (single_use = 0 OR consumed_at IS NULL
				OR EXISTS (SELECT 1 FROM agents WHERE agents.id = ? AND agents.token_id = agent_tokens.id))
			RETURNING `+agentTokenCols, now, now, tokenID, now, agentID, agentID))
		if isNoRows(err) {
			return errBadToken()
		}
		return err
	})
	return tk, err
}

// RevokeAgentToken revokes a token; agents using it are to be disconnected
// by the caller.
func (a Auth) RevokeAgentToken(ctx context.Context, id string) error {
	return a.revoke(ctx, "agent_tokens", id)
}

// ListAgentTokens lists agent tokens, newest first.
func (a Auth) ListAgentTokens(ctx context.Context) ([]AgentToken, error) {
	rows, err := a.h.reader().query(ctx, "SELECT "+agentTokenCols+" FROM agent_tokens ORDER BY created_at DESC, id DESC")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []AgentToken
	for rows.Next() {
		tk, err := scanAgentToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, tk)
	}
	return out, rows.Err()
}

func (a Auth) revoke(ctx context.Context, table, id string) error {
	return a.h.write(ctx, func(t *txn) error {
		res, err := t.exec(ctx, "UPDATE "+table+" SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", ms(t.now), id)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			var c int
			if err := t.queryRow(ctx, "SELECT COUNT(*) FROM "+table+" WHERE id = ?", id).Scan(&c); err != nil {
				return err
			}
			if c == 0 {
				return notFound("token %s does not exist", id)
			}
		}
		return nil
	})
}
