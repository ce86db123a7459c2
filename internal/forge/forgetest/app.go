package forgetest

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// App makes the fake a GitHub App installation, as GitHub serves one: POST
// /app/installations/{InstallationID}/access_tokens takes the App's RS256
// JWT and mints an installation token, with the installation's permissions
// or, when the request names some, only those (more than the installation
// has is 422). Every other request must then carry one of those tokens
// and, per endpoint, its permission: contents for reading code, statuses
// and checks for writing them; a token without it is answered 403
// "Resource not accessible by integration", as GitHub answers.
type App struct {
	ID             string // the JWT's issuer
	InstallationID int64
	Key            *rsa.PublicKey
	// Permissions are the installation's, e.g. {"contents": "read",
	// "statuses": "write", "checks": "write"}.
	Permissions map[string]string
}

// SetApp makes the fake answer as the App installation a describes.
func (g *GitHub) SetApp(a App) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.app = &a
	g.appTokens = map[string]map[string]string{}
}

// Minted are the installation tokens minted so far with their permissions.
func (g *GitHub) Minted() map[string]map[string]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := map[string]map[string]string{}
	for t, p := range g.appTokens {
		out[t] = p
	}
	return out
}

// serveApp answers the token exchange; ok is false for other requests.
func (g *GitHub) serveApp(w http.ResponseWriter, r *http.Request) (ok bool) {
	g.mu.Lock()
	app := g.app
	g.mu.Unlock()
	want := fmt.Sprintf("/app/installations/%d/access_tokens", app.InstallationID)
	if !strings.HasPrefix(r.URL.Path, "/app/") {
		return false
	}
	if r.URL.Path != want || r.Method != http.MethodPost {
		notFound(w)
		return true
	}
	if why := checkJWT(r.Header.Get("Authorization"), app, time.Now()); why != "" {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "A JSON web token could not be decoded (" + why + ")"})
		return true
	}
	var req struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if body, _ := io.ReadAll(r.Body); len(body) > 0 && json.Unmarshal(body, &req) != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return true
	}
	perms := app.Permissions
	if req.Permissions != nil {
		for k, v := range req.Permissions {
			if !grants(app.Permissions[k], v) {
				writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "The permissions requested are not granted to this installation."})
				return true
			}
		}
		perms = req.Permissions
	}
	g.mu.Lock()
	tok := fmt.Sprintf("ghs_fake%d", len(g.appTokens)+1)
	g.appTokens[tok] = perms
	g.mu.Unlock()
	out := map[string]any{"token": tok, "expires_at": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"permissions": perms, "repository_selection": "all"}
	if len(req.Repositories) > 0 {
		out["repository_selection"] = "selected"
	}
	writeJSON(w, http.StatusCreated, out)
	return true
}

// grants reports whether the permission level have covers want.
func grants(have, want string) bool {
	return have == want || (have == "write" && want == "read")
}

// appAllowed checks an API request's installation token and the permission
// its endpoint needs ("" when it is allowed); called with mu.
func (g *GitHub) appAllowed(r *http.Request, need, level string) (status int, msg string) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	perms, ok := g.appTokens[tok]
	if !ok {
		return http.StatusUnauthorized, "Bad credentials"
	}
	if need != "" && !grants(perms[need], level) {
		return http.StatusForbidden, "Resource not accessible by integration"
	}
	return 0, ""
}

// permissionFor is the App permission a repository endpoint needs.
func permissionFor(method, resource string) (string, string) {
	switch {
	case resource == "check-runs" || resource == "check-runs-list":
		if method == http.MethodGet {
			return "checks", "read"
		}
		return "checks", "write"
	case resource == "statuses" && method == http.MethodPost:
		return "statuses", "write"
	case resource == "collaborators":
		return "", ""
	}
	return "contents", "read"
}

// checkJWT verifies an App JWT as GitHub does: RS256 by the App's key,
// issued by the App, at most 10 minutes long.
func checkJWT(auth string, app *App, now time.Time) string {
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	parts := strings.Split(tok, ".")
	if !ok || len(parts) != 3 {
		return "not a bearer JWT"
	}
	enc := base64.RawURLEncoding
	sig, _ := enc.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if app.Key == nil || rsa.VerifyPKCS1v15(app.Key, crypto.SHA256, sum[:], sig) != nil {
		return "bad signature"
	}
	var claims struct {
		Iat, Exp int64
		Iss      any
	}
	cb, _ := enc.DecodeString(parts[1])
	if json.Unmarshal(cb, &claims) != nil {
		return "claims do not decode"
	}
	switch {
	case fmt.Sprint(claims.Iss) != app.ID:
		return "unknown issuer"
	case claims.Exp <= now.Unix() || claims.Exp-claims.Iat > 600:
		return "expired or longer than 10 minutes"
	}
	return ""
}
