package store

import (
	"context"
	"fmt"
	"time"
)

// RevokeAdminToken revokes an admin token at once, and with it the tokens
// it replaced that are still in their grace period (revoking a credential
// ends every secret of it). Revoking a revoked token changes nothing. The
// last admin-role token in use cannot be revoked (ErrConflict): nobody
// could administer kiln any more; rotate it instead.
func (a Auth) RevokeAdminToken(ctx context.Context, id string) (AdminToken, error) {
	var tk AdminToken
	err := a.h.write(ctx, func(t *txn) error {
		var err error
		tk, err = scanAdminToken(t.queryRow(ctx, "SELECT "+adminTokenCols+" FROM admin_tokens WHERE id = ?", id))
		if isNoRows(err) {
			return notFound("admin token %s does not exist", id)
		}
		if err != nil || (!tk.RevokedAt.IsZero() && !tk.RevokedAt.After(t.now)) {
			return err
		}
		if tk.Role == RoleAdmin && tk.RevokedAt.IsZero() && tk.Usable(t.now) {
			var others int
			if err := t.queryRow(ctx, `SELECT COUNT(*) FROM admin_tokens WHERE id <> ? AND role = ? AND `+currentAdmin,
				id, string(RoleAdmin), ms(t.now)).Scan(&others); err != nil {
				return err
			}
			if others == 0 {
				instead := "rotate it instead"
				if tk.Name == ConfiguredAdminToken {
					instead = "change the admin_token setting instead"
				}
				return conflict("%s is the last admin token: nobody could administer kiln without it; %s, or create another admin token first", tk.Name, instead)
			}
		}
		if tk, err = t.revokeAdminToken(ctx, id); err != nil {
			return err
		}
		return t.endGrace(ctx, id)
	})
	if err != nil {
		return AdminToken{}, fmt.Errorf("revoke admin token: %w", err)
	}
	return tk, nil
}

func (t *txn) revokeAdminToken(ctx context.Context, id string) (AdminToken, error) {
	return scanAdminToken(t.queryRow(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE id = ? RETURNING `+adminTokenCols,
		ms(t.now), id))
}

// endGrace revokes now the tokens id replaced, and the ones they replaced,
// that are still in their grace period.
func (t *txn) endGrace(ctx context.Context, id string) error {
	for next := []string{id}; len(next) > 0; {
		cur := next[0]
		next = next[1:]
		ids, err := t.ids(ctx, `UPDATE admin_tokens SET revoked_at = ? WHERE replaced_by = ? AND revoked_at > ? RETURNING id`,
			ms(t.now), cur, ms(t.now))
		if err != nil {
			return err
		}
		next = append(next, ids...)
	}
	return nil
}

// RotatedAdminToken is the outcome of a rotation.
type RotatedAdminToken struct {
	Token  AdminToken // the new token: same name and role, a new secret
	Secret string     // its secret, shown once
	Old    AdminToken // the token it replaces, revoked now or at the end of the grace
}

// RotateAdminToken gives the admin token id a successor with a new secret,
// the same name and role, and as long a lifetime as it had; the old token
// is revoked after grace (at once when grace is 0). A token that was
// revoked, expired or already rotated cannot be (ErrConflict), nor can the
// one admin_token configures: that one changes with the setting.
func (a Auth) RotateAdminToken(ctx context.Context, id string, grace time.Duration, createdBy string) (RotatedAdminToken, error) {
	if grace < 0 {
		return RotatedAdminToken{}, invalid("the grace period must not be negative")
	}
	var out RotatedAdminToken
	err := a.h.write(ctx, func(t *txn) error {
		old, err := scanAdminToken(t.queryRow(ctx, "SELECT "+adminTokenCols+" FROM admin_tokens WHERE id = ?", id))
		if isNoRows(err) {
			return notFound("admin token %s does not exist", id)
		}
		if err != nil {
			return err
		}
		if err := rotatable(old, t.now); err != nil {
			return err
		}
		spec := AdminTokenSpec{Name: old.Name, Role: old.Role, CreatedBy: createdBy}
		if !old.ExpiresAt.IsZero() {
			spec.ExpiresAt = t.now.Add(old.ExpiresAt.Sub(old.CreatedAt))
		}
		if out.Token, out.Secret, err = t.insertAdminToken(ctx, spec); err != nil {
			return err
		}
		out.Old, err = scanAdminToken(t.queryRow(ctx, `UPDATE admin_tokens SET revoked_at = ?, replaced_by = ?
			WHERE id = ? AND revoked_at IS NULL RETURNING `+adminTokenCols, ms(t.now.Add(grace)), out.Token.ID, id))
		if isNoRows(err) {
			return conflict("admin token %s was revoked or rotated meanwhile", id)
		}
		return err
	})
	if err != nil {
		return RotatedAdminToken{}, fmt.Errorf("rotate admin token: %w", err)
	}
	return out, nil
}

// rotatable says why a token cannot be rotated, if it cannot.
func rotatable(tk AdminToken, now time.Time) error {
	switch {
	case tk.Name == ConfiguredAdminToken:
		return conflict("admin token %s comes from the server's admin_token setting: change the setting and restart; the old one is revoked then", tk.ID)
	case tk.ReplacedBy != "":
		return conflict("admin token %s was already rotated; it is replaced by %s", tk.ID, tk.ReplacedBy)
	case !tk.RevokedAt.IsZero():
		return conflict("admin token %s is revoked; create a new one", tk.ID)
	case !tk.Usable(now):
		return conflict("admin token %s has expired; create a new one", tk.ID)
	}
	return nil
}
