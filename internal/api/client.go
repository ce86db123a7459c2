package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/kilnci/kiln"
)

// Client calls the API. Every method returns a *kiln.Error carrying the
// server's code and message when the server refuses, and a
// kiln.CodeUnavailable one when the server cannot be reached.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// ClientOption adjusts a Client.
type ClientOption func(*Client)

// WithHTTPClient makes the client send its requests with hc. It must not
// have a Timeout if the client follows logs (a stream lasts as long as the
// job); deadlines come from the methods' contexts.
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.http = hc } }

// DefaultServer is where the CLI looks for a server when told nothing.
const DefaultServer = "http://127.0.0.1:4000"

// maxAnswerBytes bounds a (non-streaming) answer the client reads.
const maxAnswerBytes = 64 << 20

// NewClient returns a client of the server at baseURL (http:// or https://)
// authenticating with an admin token.
func NewClient(baseURL, token string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(strings.TrimSuffix(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, kiln.Errorf(kiln.CodeInvalid, "the server address %q is not an http:// or https:// URL", baseURL)
	}
	c := &Client{base: u, token: token, http: &http.Client{}}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// request sends one request: in (if not nil) as the JSON body.
func (c *Client) request(ctx context.Context, method, path string, query url.Values, in any) (*http.Response, error) {
	u := *c.base
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		return nil, fmt.Errorf("request path %q: %w", path, err)
	}
	u.Path, u.RawPath = c.base.Path+unescaped, c.base.EscapedPath()+path
	u.RawQuery = query.Encode()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, kiln.Errorf(kiln.CodeUnavailable, "cannot reach the kiln server at %s: %s", c.base.Redacted(), rootCause(err))
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// do sends a request and decodes the JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, query url.Values, in, out any) (int, error) {
	resp, err := c.request(ctx, method, path, query, in)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
		return resp.StatusCode, nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswerBytes)).Decode(out); err != nil {
		return resp.StatusCode, kiln.Errorf(kiln.CodeInternal, "the server's answer to %s %s is not what kiln expects: %v", method, path, err)
	}
	return resp.StatusCode, nil
}

// decodeError turns an error answer into a *kiln.Error: the server's code
// and message, or a sentence built from the status for anything else (a
// proxy's HTML page).
func decodeError(resp *http.Response) error {
	var body kiln.ErrorBody
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" && body.Error.Message != "" {
		return &kiln.Error{Code: body.Error.Code, Message: body.Error.Message}
	}
	return kiln.Errorf(kiln.CodeOfStatus(resp.StatusCode), "the server answered %s to %s %s", resp.Status, resp.Request.Method, resp.Request.URL.Path)
}

// rootCause is the innermost error, without the URL that net/http repeats.
func rootCause(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// Health asks /health whether the server is up.
func (c *Client) Health(ctx context.Context) error {
	_, err := c.do(ctx, "GET", "/health", nil, nil, nil)
	return err
}

// Ready asks /ready whether the server can serve (its database answers).
func (c *Client) Ready(ctx context.Context) error {
	_, err := c.do(ctx, "GET", "/ready", nil, nil, nil)
	return err
}

// pollEvery is how often WaitRun reads a run.
const pollEvery = time.Second
