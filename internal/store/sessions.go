package store

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"time"
)

// Sessions keeps the dashboard's login sessions (issue 18). A session is
// opened with an admin or read-only token and lives in the database, so
// every server sharing it honours the cookie; the cookie's secret is
// stored only as its SHA-256.
type Sessions struct{ h handle }

// Sessions returns the dashboard's sessions.
func (db *DB) Sessions() Sessions { return Sessions{h: handle{db: db}} }

// Session is an open dashboard session and the token it acts as.
type Session struct {
	// CSRF is the anti-forgery token every form of the session echoes.
	CSRF      string
	CreatedAt time.Time
	ExpiresAt time.Time
	Token     AdminToken
}

// NewSessionSecret returns a random secret for a cookie or a CSRF field.
func NewSessionSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("session secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Open authenticates secret (an admin or read-only token) and opens a
// session for it lasting ttl, or until the token ends if sooner. It
// returns the session's cookie value (shown once, stored hashed) and the
// session. A bad secret is an ErrUnauthorized error.
func (ss Sessions) Open(ctx context.Context, secret string, ttl time.Duration) (string, Session, error) {
	tk, err := Auth(ss).AuthenticateAdmin(ctx, secret)
	if err != nil {
		return "", Session{}, err
	}
	cookie, err := NewSessionSecret()
	if err != nil {
		return "", Session{}, err
	}
	csrf, err := NewSessionSecret()
	if err != nil {
		return "", Session{}, err
	}
	s := Session{CSRF: csrf, Token: tk}
	err = ss.h.write(ctx, func(t *txn) error {
		s.CreatedAt = t.now
		s.ExpiresAt = t.now.Add(ttl)
		if !tk.ExpiresAt.IsZero() && tk.ExpiresAt.Before(s.ExpiresAt) {
			s.ExpiresAt = tk.ExpiresAt
		}
		// Expired sessions go as new ones come, so the table stays small
		// without a sweeper.
		if _, err := t.exec(ctx, "DELETE FROM dashboard_sessions WHERE expires_at <= ?", ms(t.now)); err != nil {
			return err
		}
		_, err := t.exec(ctx, `INSERT INTO dashboard_sessions (id_hash, token_id, csrf, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?)`, HashToken(cookie), tk.ID, csrf, ms(s.CreatedAt), ms(s.ExpiresAt))
		return err
	})
	if err != nil {
		return "", Session{}, fmt.Errorf("open session: %w", err)
	}
	return cookie, s, nil
}

// Get returns the session of a cookie value while it and its token are
// valid: not expired, not logged out, the token neither revoked nor
// expired. Anything else is an ErrUnauthorized error.
func (ss Sessions) Get(ctx context.Context, cookie string) (Session, error) {
	now := ss.h.now()
	var s Session
	var created, expires int64
	row := ss.h.reader().queryRow(ctx, `SELECT s.csrf, s.created_at, s.expires_at, `+prefixed("a.", adminTokenCols)+`
		FROM dashboard_sessions s JOIN admin_tokens a ON a.id = s.token_id
		WHERE s.id_hash = ? AND s.expires_at > ?
		AND (a.revoked_at IS NULL OR a.revoked_at > ?) AND (a.expires_at IS NULL OR a.expires_at > ?)`,
		HashToken(cookie), ms(now), ms(now), ms(now))
	tk, err := scanAdminToken(scanPrefix{row, []any{&s.CSRF, &created, &expires}})
	if isNoRows(err) {
		return Session{}, errBadToken()
	}
	if err != nil {
		return Session{}, err
	}
	s.Token = tk
	s.CreatedAt, s.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	return s, nil
}

// Close ends the session of a cookie value (logout); closing an unknown
// or ended session does nothing.
func (ss Sessions) Close(ctx context.Context, cookie string) error {
	return ss.h.write(ctx, func(t *txn) error {
		_, err := t.exec(ctx, "DELETE FROM dashboard_sessions WHERE id_hash = ?", HashToken(cookie))
		return err
	})
}

// prefixed qualifies each column of a comma-separated list.
func prefixed(p, cols string) string {
	out := ""
	start := 0
	for i := 0; i <= len(cols); i++ {
		if i == len(cols) || cols[i] == ',' {
			col := cols[start:i]
			for len(col) > 0 && col[0] == ' ' {
				col = col[1:]
			}
			if out != "" {
				out += ", "
			}
			out += p + col
			start = i + 1
		}
	}
	return out
}

// scanPrefix scans leading columns into pre, the rest into the caller's
// destinations.
type scanPrefix struct {
	r   interface{ Scan(...any) error }
	pre []any
}

func (s scanPrefix) Scan(dest ...any) error { return s.r.Scan(append(s.pre, dest...)...) }
