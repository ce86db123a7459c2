package store

import (
	"context"
	"fmt"
	"strings"
)

// An operator names a token to revoke or rotate the way they see it: by the
// id a listing shows, by the name they gave it, or by the first characters
// of its id or of its secret (the prefix listings show). Ids match in any
// state, so revoking twice is harmless; names and prefixes match only
// tokens still in use, which is what an operator means by them.

// MinTokenRefPrefix is the shortest prefix that names a token: fewer
// characters match too much by accident.
const MinTokenRefPrefix = 4

// maxRefCandidates bounds the tokens an ambiguous reference lists.
const maxRefCandidates = 10

// tokenKind is what the lookups of agent and admin tokens share.
type tokenKind struct {
	table string
	noun  string
	// current is the condition of a token a name designates.
	current string
}

var (
	agentTokenKind = tokenKind{table: "agent_tokens", noun: "agent token",
		current: "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)"}
	adminTokenKind = tokenKind{table: "admin_tokens", noun: "admin token", current: currentAdmin}
)

// usableCond is the condition of a token that still authenticates: for an
// admin token, one rotated with a grace period still does.
const usableCond = "(revoked_at IS NULL OR revoked_at > ?) AND (expires_at IS NULL OR expires_at > ?)"

// FindAgentToken returns the agent token ref names: its id, the name of
// exactly one token in use, or a unique prefix (at least MinTokenRefPrefix
// characters) of the id or secret of one. An unknown reference is
// ErrNotFound; one that matches several tokens is ErrInvalid, listing them.
func (a Auth) FindAgentToken(ctx context.Context, ref string) (AgentToken, error) {
	id, err := a.findToken(ctx, agentTokenKind, ref)
	if err != nil {
		return AgentToken{}, err
	}
	tk, err := scanAgentToken(a.h.reader().queryRow(ctx, "SELECT "+agentTokenCols+" FROM agent_tokens WHERE id = ?", id))
	if isNoRows(err) {
		return AgentToken{}, notFound("there is no agent token %q", ref)
	}
	return tk, err
}

// FindAdminToken is FindAgentToken for admin tokens. A name designates the
// current token of that name, not the one a rotation is retiring.
func (a Auth) FindAdminToken(ctx context.Context, ref string) (AdminToken, error) {
	id, err := a.findToken(ctx, adminTokenKind, ref)
	if err != nil {
		return AdminToken{}, err
	}
	return a.GetAdminToken(ctx, id)
}

// findToken resolves ref to a token id: by id, then by name, then by prefix.
func (a Auth) findToken(ctx context.Context, k tokenKind, ref string) (string, error) {
	if ref == "" {
		return "", notFound("name a %s by its id, its name or the start of its id", k.noun)
	}
	r := a.h.reader()
	var id string
	err := r.queryRow(ctx, "SELECT id FROM "+k.table+" WHERE id = ?", ref).Scan(&id)
	if err == nil || !isNoRows(err) {
		return id, err
	}
	now := ms(a.h.now())
	cands, err := a.tokenCandidates(ctx, k, "name = ? AND "+k.current, ref, now)
	if err != nil {
		return "", err
	}
	if len(cands) == 0 && len(ref) >= MinTokenRefPrefix {
		n := len(ref)
		cands, err = a.tokenCandidates(ctx, k, "(substr(id, 1, ?) = ? OR substr(prefix, 1, ?) = ?) AND "+usableCond,
			n, ref, n, ref, now, now)
		if err != nil {
			return "", err
		}
	}
	switch len(cands) {
	case 0:
		if len(ref) < MinTokenRefPrefix {
			return "", notFound("there is no %s named %q (a prefix needs at least %d characters)", k.noun, ref, MinTokenRefPrefix)
		}
		return "", notFound("there is no %s %q in use (by id, name, or the start of its id or secret)", k.noun, ref)
	case 1:
		return cands[0].id, nil
	}
	list := make([]string, 0, len(cands))
	for i, c := range cands {
		if i == maxRefCandidates {
			list = append(list, "…")
			break
		}
		list = append(list, c.String())
	}
	return "", invalid("%q matches %s %ss: %s; give its id", ref, countWord(len(cands)), k.noun, strings.Join(list, "; "))
}

// tokenCandidate is a token an ambiguous reference lists.
type tokenCandidate struct{ id, name, prefix string }

func (c tokenCandidate) String() string {
	if c.name == "" {
		return fmt.Sprintf("%s (%s…)", c.id, c.prefix)
	}
	return fmt.Sprintf("%s (%q, %s…)", c.id, c.name, c.prefix)
}

func (a Auth) tokenCandidates(ctx context.Context, k tokenKind, where string, args ...any) ([]tokenCandidate, error) {
	rows, err := a.h.reader().query(ctx, "SELECT id, name, prefix FROM "+k.table+" WHERE "+where+
		fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT %d", maxRefCandidates+1), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []tokenCandidate
	for rows.Next() {
		var c tokenCandidate
		if err := rows.Scan(&c.id, &c.name, &c.prefix); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// countWord says how many candidates matched: "more than 10" past the list.
func countWord(n int) string {
	if n > maxRefCandidates {
		return fmt.Sprintf("more than %d", maxRefCandidates)
	}
	return fmt.Sprint(n)
}
