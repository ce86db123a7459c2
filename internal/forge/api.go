package forge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/kilnci/kiln"
)

// Defaults for talking to forge APIs.
const (
	DefaultHTTPTimeout      = 30 * time.Second
	DefaultMaxResponseBytes = 16 << 20
	userAgent               = "kiln"
)

// APIError is a forge API call that failed. It unwraps to a *kiln.Error
// whose message says what happened in a sentence (rate limits, bad
// credentials, not found), so callers use kiln.ErrorCode on it.
type APIError struct {
	Status int // HTTP status; 0 when the request never got an answer
	// RetryAfter is how long the forge asked us to wait (rate limits).
	RetryAfter time.Duration
	Err        *kiln.Error
}

func (e *APIError) Error() string { return e.Err.Message }
func (e *APIError) Unwrap() error { return e.Err }

// Retryable reports whether err is worth retrying later: the forge was
// down, slow, unreachable or rate limiting, as opposed to refusing the
// request for good (bad credentials, no such repository, invalid input).
func Retryable(err error) bool {
	if err == nil {
		return false
	}
	var ae *APIError
	if errors.As(err, &ae) && ae.RetryAfter > 0 {
		return true
	}
	switch kiln.ErrorCode(err) {
	case kiln.CodeUnavailable, kiln.CodeInternal:
		return true
	}
	return false
}

// apiClient is the part every forge's REST client shares: auth, bounded
// responses, JSON, and mapping failures onto sentences.
type apiClient struct {
	forge   string   // "GitHub", "Gitea": used in messages
	base    *url.URL // API root, no trailing slash
	hc      *http.Client
	auth    func(ctx context.Context) (string, error) // Authorization header value
	headers map[string]string
	maxBody int64
	now     func() time.Time
}

// request is one call. path is already escaped and starts with "/".
type request struct {
	method string
	path   string
	query  url.Values
	in     any // JSON body
	accept string
}

// do sends req and decodes a 2xx JSON answer into out (when non-nil). It
// returns the response headers (for pagination) and maps failures.
func (c *apiClient) do(ctx context.Context, req request, out any) (http.Header, error) {
	raw, h, err := c.doRaw(ctx, req)
	if err != nil {
		return h, err
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return h, c.fail(0, kiln.CodeUnavailable, "%s answered %s with a body that is not the expected JSON", c.forge, req.describe())
		}
	}
	return h, nil
}

func (c *apiClient) doRaw(ctx context.Context, req request) ([]byte, http.Header, error) {
	u := c.base.String() + req.path
	if len(req.query) > 0 {
		u += "?" + req.query.Encode()
	}
	var body io.Reader
	if req.in != nil {
		b, err := json.Marshal(req.in)
		if err != nil {
			return nil, nil, fmt.Errorf("encode %s request: %w", c.forge, err)
		}
		body = bytes.NewReader(b)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u, body)
	if err != nil {
		return nil, nil, fmt.Errorf("build %s request: %w", c.forge, err)
	}
	for k, v := range c.headers {
		hr.Header.Set(k, v)
	}
	if req.accept != "" {
		hr.Header.Set("Accept", req.accept)
	}
	hr.Header.Set("User-Agent", userAgent)
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if c.auth != nil {
		a, err := c.auth(ctx)
		if err != nil {
			return nil, nil, err
		}
		hr.Header.Set("Authorization", a)
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return nil, nil, c.transportErr(ctx, req, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.maxBody+1))
	if err != nil {
		return nil, resp.Header, c.transportErr(ctx, req, err)
	}
	if int64(len(raw)) > c.maxBody {
		return nil, resp.Header, c.fail(resp.StatusCode, kiln.CodeTooLarge, "%s's answer to %s is larger than %s; kiln does not read it", c.forge, req.describe(), sizeString(c.maxBody))
	}
	if resp.StatusCode/100 != 2 {
		return nil, resp.Header, c.statusErr(req, resp, raw)
	}
	return raw, resp.Header, nil
}

func (c *apiClient) transportErr(ctx context.Context, req request, err error) error {
	if ctx.Err() != nil {
		return c.fail(0, kiln.CodeUnavailable, "%s did not answer %s in time (%v)", c.forge, req.describe(), context.Cause(ctx))
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Timeout() {
		return c.fail(0, kiln.CodeUnavailable, "%s did not answer %s in time", c.forge, req.describe())
	}
	return c.fail(0, kiln.CodeUnavailable, "could not reach %s for %s", c.forge, req.describe())
}

// statusErr turns a non-2xx answer into a sentence. GitHub signals rate
// limits with 403 or 429 plus X-RateLimit-Remaining: 0 (primary) or
// Retry-After (secondary); Gitea answers 429 with Retry-After.
func (c *apiClient) statusErr(req request, resp *http.Response, raw []byte) error {
	msg := forgeMessage(raw)
	st := resp.StatusCode
	if st == http.StatusForbidden || st == http.StatusTooManyRequests {
		if wait, ok := c.rateLimitWait(resp.Header); ok {
			e := c.fail(st, kiln.CodeUnavailable, "%s's API rate limit is exhausted; it allows requests again in %s (%s)", c.forge, wait.Round(time.Second), req.describe())
			e.(*APIError).RetryAfter = max(wait, time.Second)
			return e
		}
	}
	switch {
	case st == http.StatusUnauthorized:
		return c.fail(st, kiln.CodeUnauthorized, "%s rejected kiln's credentials for %s%s; check the source's token", c.forge, req.describe(), msg)
	case st == http.StatusForbidden:
		return c.fail(st, kiln.CodeForbidden, "%s refused %s%s; the token may lack a permission", c.forge, req.describe(), msg)
	case st == http.StatusNotFound:
		return c.fail(st, kiln.CodeNotFound, "%s has no such resource: %s%s (or the token cannot see it)", c.forge, req.describe(), msg)
	case st == http.StatusUnprocessableEntity || st == http.StatusBadRequest || st == http.StatusConflict:
		return c.fail(st, kiln.CodeInvalid, "%s refused %s as invalid%s", c.forge, req.describe(), msg)
	case st == http.StatusTooManyRequests || st >= 500:
		return c.fail(st, kiln.CodeUnavailable, "%s answered %s with %d %s", c.forge, req.describe(), st, http.StatusText(st))
	}
	return c.fail(st, kiln.CodeUnavailable, "%s answered %s with unexpected status %d", c.forge, req.describe(), st)
}

func (c *apiClient) rateLimitWait(h http.Header) (time.Duration, bool) {
	if ra := h.Get("Retry-After"); ra != "" {
		if s, err := strconv.Atoi(ra); err == nil && s >= 0 {
			return time.Duration(s) * time.Second, true
		}
	}
	if h.Get("X-RateLimit-Remaining") == "0" {
		if reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(reset, 0).Sub(c.now()), 0), true
		}
		return time.Minute, true
	}
	return 0, false
}

func (c *apiClient) fail(status int, code kiln.Code, format string, args ...any) error {
	return &APIError{Status: status, Err: kiln.Errorf(code, format, args...).(*kiln.Error)}
}

// describe names the call in messages: method and path, never the query.
func (r request) describe() string { return r.method + " " + r.path }

// forgeMessage extracts the "message" both GitHub and Gitea put in error
// bodies, bounded and on one line, as ": <message>".
func forgeMessage(raw []byte) string {
	var e struct {
		Message string `json:"message"`
		// GitHub's 422 "Validation Failed" says what failed here, as
		// objects with a message or as plain strings.
		Errors []json.RawMessage `json:"errors"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Message == "" {
		return ""
	}
	if len(e.Errors) > 0 {
		var first struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(e.Errors[0], &first) != nil {
			_ = json.Unmarshal(e.Errors[0], &first.Message)
		}
		if first.Message != "" {
			e.Message += ": " + first.Message
		}
	}
	// The forge's words reach logs, the event log and terminals: no
	// control or formatting characters (an escape sequence, a bidi
	// override), one line, at most 200 runes (B136).
	m := strings.Map(func(r rune) rune {
		if unicode.IsControl(r) && !unicode.IsSpace(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, e.Message)
	m = strings.Join(strings.Fields(m), " ")
	if r := []rune(m); len(r) > 200 {
		m = string(r[:200]) + "…"
	}
	if m == "" {
		return ""
	}
	return " (" + m + ")"
}

// checkRepo returns nil when the repository at rp exists and the
// credentials can see it.
func (c *apiClient) checkRepo(ctx context.Context, rp string) error {
	_, err := c.do(ctx, request{method: http.MethodGet, path: rp}, nil)
	return err
}

// escapePath escapes each "/"-separated segment of p.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// repoPath is "/repos/{owner}/{name}" for a checked owner/name.
func repoPath(repo string) (string, error) {
	owner, name, err := splitRepo(repo)
	if err != nil {
		return "", err
	}
	return "/repos/" + url.PathEscape(owner) + "/" + url.PathEscape(name), nil
}

func parseBase(raw, trimSuffix string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil {
		return nil, kiln.Errorf(kiln.CodeInvalid, "%q is not a URL", raw)
	}
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), trimSuffix)
	u.RawPath = ""
	return u, nil
}
