package api

import (
	"context"
	"net/url"
	"strconv"

	"github.com/kilnci/kiln/internal/forge"
)

// Queue returns the dispatch queue with up to limit waiting jobs (0: the
// server's default).
func (c *Client) Queue(ctx context.Context, limit int) (Queue, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out Queue
	_, err := c.do(ctx, "GET", "/api/v1/queue", q, nil, &out)
	return out, err
}

// Agents lists the agents kiln knows.
func (c *Client) Agents(ctx context.Context) ([]Agent, error) {
	var out AgentList
	_, err := c.do(ctx, "GET", "/api/v1/agents", nil, nil, &out)
	return out.Agents, err
}

// DrainAgent stops giving an agent new jobs.
func (c *Client) DrainAgent(ctx context.Context, id string) (Agent, error) {
	var out Agent
	_, err := c.do(ctx, "POST", "/api/v1/agents/"+url.PathEscape(id)+"/drain", nil, nil, &out)
	return out, err
}

// Tokens lists agent tokens, newest first.
func (c *Client) Tokens(ctx context.Context) ([]AgentToken, error) {
	var out TokenList
	_, err := c.do(ctx, "GET", "/api/v1/tokens", nil, nil, &out)
	return out.Tokens, err
}

// CreateToken creates an agent token; the secret is in the answer only.
func (c *Client) CreateToken(ctx context.Context, r CreateTokenRequest) (CreatedToken, error) {
	var out CreatedToken
	_, err := c.do(ctx, "POST", "/api/v1/tokens", nil, r, &out)
	return out, err
}

// RevokeToken revokes an agent token and disconnects the agents using it;
// RevokeAgentToken says which token it was.
func (c *Client) RevokeToken(ctx context.Context, ref string) error {
	_, err := c.RevokeAgentToken(ctx, ref)
	return err
}

// Sources lists the configured sources, secrets redacted.
func (c *Client) Sources(ctx context.Context) ([]Source, error) {
	var out SourceList
	_, err := c.do(ctx, "GET", "/api/v1/sources", nil, nil, &out)
	return out.Sources, err
}

// Source returns one source by name, secrets redacted.
func (c *Client) Source(ctx context.Context, name string) (Source, error) {
	var out Source
	_, err := c.do(ctx, "GET", "/api/v1/sources/"+url.PathEscape(name), nil, nil, &out)
	return out, err
}

// AddSource configures a new source, with the default fork policy, and
// returns it redacted.
func (c *Client) AddSource(ctx context.Context, s forge.Source) (Source, error) {
	return c.CreateSource(ctx, SourceRequest{Source: s})
}

// CreateSource configures a new source with its fork policy and returns it
// redacted, with warnings about its credentials.
func (c *Client) CreateSource(ctx context.Context, req SourceRequest) (Source, error) {
	var out Source
	_, err := c.do(ctx, "POST", "/api/v1/sources", nil, req, &out)
	return out, err
}

// UpdateSource changes a source with a JSON merge patch (members replace,
// null removes, objects merge) and returns it redacted, with warnings
// when its credentials changed.
func (c *Client) UpdateSource(ctx context.Context, name string, patch map[string]any) (Source, error) {
	var out Source
	_, err := c.do(ctx, "PATCH", "/api/v1/sources/"+url.PathEscape(name), nil, patch, &out)
	return out, err
}

// RemoveSource removes a source.
func (c *Client) RemoveSource(ctx context.Context, name string) error {
	_, err := c.do(ctx, "DELETE", "/api/v1/sources/"+url.PathEscape(name), nil, nil, nil)
	return err
}

// HookQuery says what a local source's hook runs and exports; each field
// may be empty (see HookConfigFor).
type HookQuery struct {
	Kiln      string // the kiln executable
	Server    string // exported as KILN_SERVER
	TokenFile string // exported as KILN_TOKEN_FILE
}

// SourceHook returns the post-receive hook of a local source.
func (c *Client) SourceHook(ctx context.Context, name string, hq HookQuery) (Hook, error) {
	q := url.Values{}
	set(q, "kiln", hq.Kiln)
	set(q, "server", hq.Server)
	set(q, "token_file", hq.TokenFile)
	var out Hook
	_, err := c.do(ctx, "GET", "/api/v1/sources/"+url.PathEscape(name)+"/hook", q, nil, &out)
	return out, err
}
