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

	mu  sync.Mutex
	tok string
	exp time.Time
}

func newAppTokens(app *GitHubApp, api *apiClient, now func() time.Time) (*appTokens, error) {
	key, err := parseRSAKey(app.PrivateKeyPEM)
	if err != nil {
		return nil, err
	}
	a := &appTokens{appID: app.AppID, inst: app.InstallationID, key: key, now: now}
	c := *api
	c.auth = func(context.Context) (string, error) {
		jwt, err := a.jwt()
		return "Bearer " + jwt, err
	}
	a.api = &c
	return a, nil
}

// token returns a valid installation token and when it expires.
func (a *appTokens) token(ctx context.Context) (string, time.Time, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.tok != "" && a.now().Before(a.exp.Add(-appTokenRenewBefore)) {
		return a.tok, a.exp, nil
	}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	path := "/app/installations/" + strconv.FormatInt(a.inst, 10) + "/access_tokens"
	if _, err := a.api.do(ctx, request{method: http.MethodPost, path: path}, &out); err != nil {
		var ae *APIError
		if errors.As(err, &ae) {
			return "", time.Time{}, &APIError{Status: ae.Status, RetryAfter: ae.RetryAfter,
				Err: kiln.Errorf(ae.Err.Code, "could not get a GitHub App installation token: %s", ae.Err.Message).(*kiln.Error)}
		}
		return "", time.Time{}, err
	}
	if out.Token == "" {
		return "", time.Time{}, kiln.Errorf(kiln.CodeUnavailable, "GitHub answered the installation token request without a token")
	}
	if out.ExpiresAt.IsZero() {
		out.ExpiresAt = a.now().Add(appTokenRenewBefore * 2)
	}
	a.tok, a.exp = out.Token, out.ExpiresAt
	return a.tok, a.exp, nil
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
