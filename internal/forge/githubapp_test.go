package forge

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
	"sync"
	"testing"
	"time"

	"github.com/kilnci/kiln"
)

// checkAppJWT verifies a GitHub App JWT the way GitHub does and returns
// a reason when it is not acceptable.
func checkAppJWT(auth string, pub *rsa.PublicKey, now time.Time) string {
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return "not a bearer token"
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "not a JWT"
	}
	enc := base64.RawURLEncoding
	var header struct{ Alg, Typ string }
	hb, _ := enc.DecodeString(parts[0])
	if json.Unmarshal(hb, &header) != nil || header.Alg != "RS256" || header.Typ != "JWT" {
		return "header " + string(hb)
	}
	sig, _ := enc.DecodeString(parts[2])
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(pub, crypto.SHA256, sum[:], sig) != nil {
		return "bad signature"
	}
	var claims struct {
		Iat, Exp int64
		Iss      string
	}
	cb, _ := enc.DecodeString(parts[1])
	if json.Unmarshal(cb, &claims) != nil {
		return "claims " + string(cb)
	}
	switch {
	case claims.Iss != "12345":
		return "iss " + claims.Iss
	case claims.Iat > now.Unix() || claims.Iat < now.Add(-2*time.Minute).Unix():
		return "iat not backdated a little"
	case claims.Exp <= now.Unix() || claims.Exp > now.Add(10*time.Minute).Unix():
		return "exp not within 10 minutes"
	}
	return ""
}

// A GitHub App source exchanges its JWT for installation tokens, cached
// until shortly before they expire; the token an agent clones with is
// minted apart, for the one repository with contents: read.
// Proves B100 (docs/behaviours.md).
func TestGitHubAppInstallationTokens(t *testing.T) {
	key := rsaTestKey(t)
	var mu sync.Mutex
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	f := newFakeForge(t, false, "Bearer ghs_1")
	exchanges, readExchanges := 0, 0
	var readBodies []string
	f.setOverride(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/app/installations/987/access_tokens" {
			return false
		}
		if r.Method != http.MethodPost {
			f.errorJSON(w, 404, "Not Found")
			return true
		}
		if why := checkAppJWT(r.Header.Get("Authorization"), &key.PublicKey, clock()); why != "" {
			f.errorJSON(w, 401, "A JSON web token could not be decoded: "+why)
			return true
		}
		body, _ := io.ReadAll(r.Body)
		var restrict struct {
			Repositories []string          `json:"repositories"`
			Permissions  map[string]string `json:"permissions"`
		}
		if len(body) > 0 && json.Unmarshal(body, &restrict) == nil && len(restrict.Repositories) > 0 {
			// A token restricted to repositories and permissions, as
			// GitHub mints it: the API token stays what it was.
			mu.Lock()
			readExchanges++
			readBodies = append(readBodies, string(body))
			n := readExchanges
			mu.Unlock()
			writeJSON(w, 201, map[string]any{
				"token": fmt.Sprintf("ghs_read_%d", n), "expires_at": clock().Add(time.Hour).Format(time.RFC3339),
				"permissions": restrict.Permissions, "repository_selection": "selected",
				"repositories": []map[string]any{{"name": restrict.Repositories[0], "full_name": "acme/" + restrict.Repositories[0]}},
			})
			return true
		}
		mu.Lock()
		exchanges++
		n := exchanges
		mu.Unlock()
		f.setToken(fmt.Sprintf("Bearer ghs_%d", n))
		writeJSON(w, 201, map[string]any{
			"token": fmt.Sprintf("ghs_%d", n), "expires_at": clock().Add(time.Hour).Format(time.RFC3339),
			"permissions": map[string]string{"contents": "read", "statuses": "write"}, "repository_selection": "selected",
		})
		return true
	})
	src := &Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{
		APIBase: f.base(), WebhookSecret: "s",
		App: &GitHubApp{AppID: "12345", InstallationID: 987, PrivateKeyPEM: pkcs1PEM(key)},
	}}
	repo, err := NewRepo(src, Options{Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	post := func() error {
		return repo.PostStatus(ctx, fakeRepo, shaA, Status{State: StatePending, Context: "kiln/ci"})
	}
	for range 3 {
		if err := post(); err != nil {
			t.Fatal(err)
		}
	}
	if exchanges != 1 {
		t.Fatalf("%d token exchanges for 3 calls, want 1 (cached)", exchanges)
	}
	// Agents get a token minted for the one repository, read-only, and
	// reused while it is fresh: never the installation's own.
	for range 2 {
		ci, err := repo.Clone(ctx, fakeRepo)
		if err != nil || ci.Username != "x-access-token" || ci.Password != "ghs_read_1" || !ci.ExpiresAt.Equal(clock().Add(time.Hour)) {
			t.Errorf("Clone = %+v %v", ci, err)
		}
	}
	if readExchanges != 1 || readBodies[0] != `{"permissions":{"contents":"read"},"repositories":["app"]}` {
		t.Errorf("clone token requests: %q", readBodies)
	}

	advance(54 * time.Minute) // still 6 minutes left: reused
	if err := post(); err != nil || exchanges != 1 {
		t.Fatalf("at 54m: %v, %d exchanges", err, exchanges)
	}
	advance(2 * time.Minute) // within 5 minutes of expiry: renewed
	if err := post(); err != nil || exchanges != 2 {
		t.Fatalf("at 56m: %v, %d exchanges", err, exchanges)
	}
	for _, p := range f.posted() {
		if !strings.HasPrefix(p.Auth, "Bearer ghs_") {
			t.Errorf("status posted with %q, not an installation token", p.Auth)
		}
	}

	// An App GitHub does not know: a sentence, and nothing posted.
	bad := *src.GitHub
	bad.App = &GitHubApp{AppID: "99", InstallationID: 987, PrivateKeyPEM: pkcs1PEM(key)}
	repo2, _ := NewRepo(&Source{Name: "gh2", Kind: kiln.SourceGitHub, GitHub: &bad}, Options{Now: clock})
	err = repo2.PostStatus(ctx, fakeRepo, shaA, Status{State: StatePending, Context: "kiln/ci"})
	wantCode(t, err, kiln.CodeUnauthorized)
	if !strings.Contains(err.Error(), "could not get a GitHub App installation token") {
		t.Errorf("bad app: %v", err)
	}
	if n := len(f.posted()); n != 5 {
		t.Errorf("%d statuses posted, want 5", n)
	}
}
