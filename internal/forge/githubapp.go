package forge

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/kilnci/kiln"
)

// GitHub App token timing. GitHub rejects JWTs that live over 10 minutes
// and recommends backdating iat against clock drift; installation tokens
// last an hour and are renewed this long before they expire.
const (
	appJWTBackdate      = 60 * time.Second
	appJWTLifetime      = 9 * time.Minute
	appTokenRenewBefore = 5 * time.Minute
)

// appTokens mints installation tokens for one GitHub App installation and
// caches each until shortly before it expires. Concurrent callers share one
// exchange.
type appTokens struct {
	appID string
	inst  int64
	key   *rsa.PrivateKey
	api   *apiClient // authenticates with the App's JWT
	now   func() time.Time

	mu   sync.Mutex
	tok  string
	exp  time.Time
	read map[string]appToken // by repository name: read-only clone tokens
}

// appToken is an installation token and when it expires.
type appToken struct {
	tok string
	exp time.Time
}

// readPermissions is all a clone token may do: read the repository's
// contents. GitHub refuses to mint it if the installation lacks that.
var readPermissions = map[string]string{"contents": "read"}

func newAppTokens(app *GitHubApp, api *apiClient, now func() time.Time) (*appTokens, error) {
	key, err := parseRSAKey(app.PrivateKeyPEM)
	if err != nil {
		return nil, err
	}
	a := &appTokens{appID: app.AppID, inst: app.InstallationID, key: key, now: now, read: map[string]appToken{}}
	c := *api
	c.auth = func(context.Context) (string, error) {
		jwt, err := a.jwt()
		return "Bearer " + jwt, err
	}
	a.api = &c
	return a, nil
}

// token returns a valid installation token, with every permission and
// repository of the installation, and when it expires: the server's own,
// for the API.
func (a *appTokens) token(ctx context.Context) (string, time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != "" && a.now().Before(a.exp.Add(-appTokenRenewBefore)) {
		return a.tok, a.exp, nil
	}
	t, err := a.exchange(ctx, nil)
	if err != nil {
		return "", time.Time{}, err
	}
	a.tok, a.exp = t.tok, t.exp
	return a.tok, a.exp, nil
}

// readToken returns a token for agents to clone repo (its name, without
// the owner) with: minted for that one repository with contents: read, so
// whoever reads it off an agent can neither push nor reach the
// installation's other repositories. Cached per repository until shortly
// before it expires.
func (a *appTokens) readToken(ctx context.Context, repo string) (string, time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if t, ok := a.read[repo]; ok && now.Before(t.exp.Add(-appTokenRenewBefore)) {
		return t.tok, t.exp, nil
	}
	for name, t := range a.read {
		if !now.Before(t.exp.Add(-appTokenRenewBefore)) {
			delete(a.read, name)
		}
	}
	t, err := a.exchange(ctx, map[string]any{"repositories": []string{repo}, "permissions": readPermissions})
	if err != nil {
		return "", time.Time{}, err
	}
	a.read[repo] = t
	return t.tok, t.exp, nil
}

// exchange asks GitHub for an installation token (POST
// /app/installations/{id}/access_tokens), restricted as body says.
func (a *appTokens) exchange(ctx context.Context, body any) (appToken, error) {
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	path := "/app/installations/" + strconv.FormatInt(a.inst, 10) + "/access_tokens"
	if _, err := a.api.do(ctx, request{method: http.MethodPost, path: path, in: body}, &out); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			return appToken{}, &APIError{Status: ae.Status, RetryAfter: ae.RetryAfter,
				Err: kiln.Errorf(ae.Err.Code, "could not get a GitHub App installation token: %s", ae.Err.Message).(*kiln.Error)}
		}
		return appToken{}, err
	}
	if out.Token == "" {
		return appToken{}, kiln.Errorf(kiln.CodeUnavailable, "GitHub answered the installation token request without a token")
	}
	if out.ExpiresAt.IsZero() {
		out.ExpiresAt = a.now().Add(appTokenRenewBefore * 2)
	}
	return appToken{out.Token, out.ExpiresAt}, nil
}

// jwt signs the App's JSON Web Token (RS256; iat backdated, exp under
// GitHub's 10-minute maximum, iss the App ID).
func (a *appTokens) jwt() (string, error) {
	now := a.now()
	header := `{"alg":"RS256","typ":"JWT"}`
	claims, err := json.Marshal(map[string]any{
		"iat": now.Add(-appJWTBackdate).Unix(),
		"exp": now.Add(appJWTLifetime).Unix(),
		"iss": a.appID,
	})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signing := enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, a.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", kiln.Errorf(kiln.CodeInternal, "could not sign the GitHub App JWT")
	}
	return signing + "." + enc.EncodeToString(sig), nil
}
