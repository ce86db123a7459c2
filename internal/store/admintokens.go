package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// Role is what an admin (API) token may do.
type Role string

const (
	// RoleAdmin may do everything the API does.
	RoleAdmin Role = "admin"
	// RoleReadOnly may read runs, logs, events, the queue and agents, and
	// nothing else: no change, no token list, no source configuration.
	RoleReadOnly Role = "read-only"
)

// Valid reports whether r is a role kiln knows.
func (r Role) Valid() bool { return r == RoleAdmin || r == RoleReadOnly }

// ConfiguredAdminToken names the admin token the server's admin_token
// setting fixes. Only the server creates a token of this name.
const ConfiguredAdminToken = "configured"

// AdminTokenSpec describes an admin token to create.
type AdminTokenSpec struct {
	Name      string // required; unique among the tokens in use
	Role      Role   // default RoleAdmin
	ExpiresAt time.Time
	CreatedBy string
}

// AdminToken is a stored admin (API) token (never the secret nor its hash).
type AdminToken struct {
	ID        string
	Prefix    string
	Name      string
	Role      Role
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt time.Time
	// RevokedAt is when the token was revoked, or, for a token rotated with
	// a grace period, when it will be: it works until then.
	RevokedAt time.Time
	// ReplacedBy is the id of the token a rotation replaced this one with.
	ReplacedBy string
	LastUsedAt time.Time
}

// Usable reports whether the token authenticates at now.
func (t AdminToken) Usable(now time.Time) bool {
	return (t.RevokedAt.IsZero() || t.RevokedAt.After(now)) && (t.ExpiresAt.IsZero() || t.ExpiresAt.After(now))
}

const adminTokenCols = `id, prefix, name, role, created_by, created_at, expires_at, revoked_at, replaced_by, last_used_at`

// currentAdmin is the condition of a token in use and not rotated: the one
// its name designates.
const currentAdmin = `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`

func scanAdminToken(r interface{ Scan(...any) error }) (AdminToken, error) {
	var tk AdminToken
	var created, expires, revoked, used sql.NullInt64
	var replacedBy sql.NullString
	err := r.Scan(&tk.ID, &tk.Prefix, &tk.Name, &tk.Role, &tk.CreatedBy, &created, &expires, &revoked, &replacedBy, &used)
	tk.CreatedAt, tk.ExpiresAt, tk.RevokedAt, tk.LastUsedAt = fromMS(created), fromMS(expires), fromMS(revoked), fromMS(used)
	tk.ReplacedBy = replacedBy.String
	return tk, err
}

// CreateAdminToken stores a new token of the admin role and returns it
// with its secret.
func (a Auth) CreateAdminToken(ctx context.Context, name string, expiresAt time.Time) (AdminToken, string, error) {
	return a.AddAdminToken(ctx, AdminTokenSpec{Name: name, Role: RoleAdmin, ExpiresAt: expiresAt})
}

// AddAdminToken stores a new admin token and returns it with its secret,
// which is shown once and never stored. Its name must not be that of
// another token in use (ErrConflict).
func (a Auth) AddAdminToken(ctx context.Context, spec AdminTokenSpec) (AdminToken, string, error) {
	if strings.TrimSpace(spec.Name) == "" {
		return AdminToken{}, "", invalid("an admin token needs a name")
	}
	if spec.Role == "" {
		spec.Role = RoleAdmin
	}
	if !spec.Role.Valid() {
		return AdminToken{}, "", invalid("role %q is not admin or read-only", spec.Role)
	}
	var tk AdminToken
	var secret string
	err := a.h.write(ctx, func(t *txn) error {
		var other string
		err := t.queryRow(ctx, `SELECT id FROM admin_tokens WHERE name = ? AND `+currentAdmin, spec.Name, ms(t.now)).Scan(&other)
		if err == nil {
			return conflict("an admin token named %q exists (%s); rotate it, or choose another name", spec.Name, other)
		}
		if !isNoRows(err) {
			return err
		}
		tk, secret, err = t.insertAdminToken(ctx, spec)
		return err
	})
	if err != nil {
		return AdminToken{}, "", fmt.Errorf("create admin token: %w", err)
	}
	return tk, secret, nil
}

// insertAdminToken stores a token with a new secret.
func (t *txn) insertAdminToken(ctx context.Context, spec AdminTokenSpec) (AdminToken, string, error) {
	secret, err := newSecret(AdminTokenPrefix)
	if err != nil {
		return AdminToken{}, "", err
	}
	tk, err := t.insertAdminTokenSecret(ctx, spec, secret)
	return tk, secret, err
}

func (t *txn) insertAdminTokenSecret(ctx context.Context, spec AdminTokenSpec, secret string) (AdminToken, error) {
	id, err := newID()
	if err != nil {
		return AdminToken{}, err
	}
	return scanAdminToken(t.queryRow(ctx, `INSERT INTO admin_tokens (id, hash, prefix, name, role, created_by, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?) RETURNING `+adminTokenCols,
		id, HashToken(secret), displayPrefix(secret, AdminTokenPrefix), spec.Name, string(spec.Role), spec.CreatedBy,
		ms(t.now), nullMS(spec.ExpiresAt)))
}

// EnsureAdminToken makes sure an admin token with the given secret exists
// (an operator fixed it with admin_token), creating it with the admin role
// if needed, and that it is the only token in use named name: the tokens
// it replaces — an earlier value of the setting — are revoked and returned.
// A secret that was revoked, or is a read-only token's, is refused.
func (a Auth) EnsureAdminToken(ctx context.Context, name, secret string) (tk AdminToken, revoked []AdminToken, err error) {
	if len(secret) < 16 {
		return AdminToken{}, nil, invalid("an admin token must be at least 16 characters long")
	}
	err = a.h.write(ctx, func(t *txn) error {
		revoked = nil
		var err error
		tk, err = scanAdminToken(t.queryRow(ctx, "SELECT "+adminTokenCols+" FROM admin_tokens WHERE hash = ?", HashToken(secret)))
		switch {
		case isNoRows(err):
			tk, err = t.insertAdminTokenSecret(ctx, AdminTokenSpec{Name: name, Role: RoleAdmin, CreatedBy: "configuration"}, secret)
			if err != nil {
				return err
			}
		case err != nil:
			return err
		case !tk.Usable(t.now):
			return invalid("the admin token given in the configuration was revoked or has expired; choose another")
		case tk.Role != RoleAdmin:
			return invalid("the admin token given in the configuration is the %s token %q; give an admin token", tk.Role, tk.Name)
		}
		rows, err := t.query(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE name = ? AND id <> ?
			AND (revoked_at IS NULL OR revoked_at > ?) RETURNING `+adminTokenCols, ms(t.now), name, tk.ID, ms(t.now))
		if err != nil {
			return err
		}
		revoked, err = scanAdminTokens(rows)
		return err
	})
	if err != nil {
		return AdminToken{}, nil, fmt.Errorf("ensure admin token: %w", err)
	}
	return tk, revoked, nil
}

// AuthenticateAdmin returns the admin token a secret belongs to, or an
// ErrUnauthorized error. A token rotated with a grace period works until
// the grace ends. It reads from the read pool and writes last_used_at at
// most once a minute, so API reads do not each take the write lock.
func (a Auth) AuthenticateAdmin(ctx context.Context, secret string) (AdminToken, error) {
	now := a.h.now()
	tk, err := scanAdminToken(a.h.reader().queryRow(ctx, `SELECT `+adminTokenCols+` FROM admin_tokens
		WHERE hash = ? AND (revoked_at IS NULL OR revoked_at > ?) AND (expires_at IS NULL OR expires_at > ?)`,
		HashToken(secret), ms(now), ms(now)))
	if isNoRows(err) {
		return AdminToken{}, errBadToken()
	}
	if err != nil {
		return AdminToken{}, err
	}
	if now.Sub(tk.LastUsedAt) >= lastUsedEvery {
		// Best effort (B131): a database that cannot write must still
		// serve reads.
		err = a.h.bestEffort(ctx, "admin token last_used_at", func(t *txn) error {
			_, err := t.exec(ctx, "UPDATE admin_tokens SET last_used_at = ? WHERE id = ?", ms(t.now), tk.ID)
			return err
		})
		tk.LastUsedAt = now
	}
	return tk, err
}

// GetAdminToken returns an admin token by id.
func (a Auth) GetAdminToken(ctx context.Context, id string) (AdminToken, error) {
	tk, err := scanAdminToken(a.h.reader().queryRow(ctx, "SELECT "+adminTokenCols+" FROM admin_tokens WHERE id = ?", id))
	if isNoRows(err) {
		return AdminToken{}, notFound("admin token %s does not exist", id)
	}
	return tk, err
}

// ListAdminTokens lists admin tokens, newest first.
func (a Auth) ListAdminTokens(ctx context.Context) ([]AdminToken, error) {
	rows, err := a.h.reader().query(ctx, "SELECT "+adminTokenCols+" FROM admin_tokens ORDER BY created_at DESC, id DESC")
	if err != nil {
		return nil, err
	}
	return scanAdminTokens(rows)
}

func scanAdminTokens(rows *sql.Rows) ([]AdminToken, error) {
	defer rows.Close()
	var out []AdminToken
	for rows.Next() {
		tk, err := scanAdminToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, tk)
	}
	return out, rows.Err()
}
