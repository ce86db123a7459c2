package api

import (
	"context"
	"net/url"
)

// RevokeAgentToken revokes the agent token ref names — its id, its name or
// the start of its id or secret — disconnects the agents using it, and
// returns it.
func (c *Client) RevokeAgentToken(ctx context.Context, ref string) (AgentToken, error) {
	var out AgentToken
	_, err := c.do(ctx, "DELETE", "/api/v1/tokens/"+url.PathEscape(ref), nil, nil, &out)
	return out, err
}

// AdminTokens lists admin tokens, newest first.
func (c *Client) AdminTokens(ctx context.Context) ([]AdminToken, error) {
	var out AdminTokenList
	_, err := c.do(ctx, "GET", "/api/v1/admin-tokens", nil, nil, &out)
	return out.Tokens, err
}

// CreateAdminToken creates an admin token; the secret is in the answer only.
func (c *Client) CreateAdminToken(ctx context.Context, r CreateAdminTokenRequest) (CreatedAdminToken, error) {
	var out CreatedAdminToken
	_, err := c.do(ctx, "POST", "/api/v1/admin-tokens", nil, r, &out)
	return out, err
}

// RevokeAdminToken revokes the admin token ref names (an id, a name or a
// prefix) and returns it.
func (c *Client) RevokeAdminToken(ctx context.Context, ref string) (AdminToken, error) {
	var out AdminToken
	_, err := c.do(ctx, "DELETE", "/api/v1/admin-tokens/"+url.PathEscape(ref), nil, nil, &out)
	return out, err
}

// RotateAdminToken gives the admin token ref names a new secret; the old
// one keeps working for r.Grace.
func (c *Client) RotateAdminToken(ctx context.Context, ref string, r RotateAdminTokenRequest) (RotatedAdminToken, error) {
	var out RotatedAdminToken
	_, err := c.do(ctx, "POST", "/api/v1/admin-tokens/"+url.PathEscape(ref)+"/rotate", nil, r, &out)
	return out, err
}
