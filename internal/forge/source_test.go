package forge

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"strings"
	"sync"
	"testing"

	"github.com/kilnci/kiln"
)

var (
	testKeyOnce sync.Once
	testKey     *rsa.PrivateKey
)

// rsaTestKey is one RSA key shared by the tests (generating is slow).
func rsaTestKey(t testing.TB) *rsa.PrivateKey {
	testKeyOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		testKey = k
	})
	return testKey
}

func pkcs1PEM(k *rsa.PrivateKey) string {
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
}

func TestSourceValidate(t *testing.T) {
	key := pkcs1PEM(rsaTestKey(t))
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(rsaTestKey(t))
	key8 := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	gh := func(c GitHubConfig) *Source { return &Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &c} }
	gt := func(c GiteaConfig) *Source { return &Source{Name: "gt", Kind: kiln.SourceGitea, Gitea: &c} }
	ge := func(c GenericConfig) *Source {
		if c.Repository == "" {
			c.Repository = "acme/app"
		}
		if c.CloneURL == "" {
			c.CloneURL = "https://git.example.com/acme/app.git"
		}
		return &Source{Name: "ge", Kind: kiln.SourceGeneric, Generic: &c}
	}
	lc := func(p string) *Source {
		return &Source{Name: "lc", Kind: kiln.SourceLocal, Local: &LocalConfig{Path: p}}
	}
	hmac := GenericAuth{Type: AuthHMAC, Secret: "s"}

	good := []*Source{
		gh(GitHubConfig{Token: "t", WebhookSecret: "s"}),
		gh(GitHubConfig{APIBase: "https://ghe.example.com/api/v3", Token: "t", WebhookSecret: "s"}),
		gh(GitHubConfig{App: &GitHubApp{AppID: "12345", InstallationID: 7, PrivateKeyPEM: key}, WebhookSecret: "s"}),
		gh(GitHubConfig{App: &GitHubApp{AppID: "Iv1.abc", InstallationID: 7, PrivateKeyPEM: key8}, WebhookSecret: "s"}),
		gt(GiteaConfig{APIBase: "http://127.0.0.1:3000", Token: "t", WebhookSecret: "s"}),
		ge(GenericConfig{Auth: hmac}),
		ge(GenericConfig{Auth: GenericAuth{Type: AuthBearer, Token: "t"}, CloneURL: "ssh://git@host/acme/app.git", DefaultBranch: "release/1.x"}),
		ge(GenericConfig{Auth: hmac, CloneURL: "file:///srv/git/app.git", CloneUsername: "u", ClonePassword: "p"}),
		lc("/srv/git/app.git"),
		lc("/srv/git/app/"),
	}
	for _, s := range good {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}

	bad := []struct {
		src  *Source
		want string
	}{
		{&Source{Name: "Bad Name", Kind: kiln.SourceLocal, Local: &LocalConfig{Path: "/x"}}, "source name"},
		{&Source{Name: "x", Kind: "gitlab"}, `kind "gitlab"`},
		{&Source{Name: "x", Kind: kiln.SourceGitHub}, `needs its "github" settings`},
		{&Source{Name: "x", Kind: kiln.SourceLocal, Local: &LocalConfig{Path: "/x"}, GitHub: &GitHubConfig{}}, "more than one kind"},
		{gh(GitHubConfig{Token: "t"}), "webhook secret is missing"},
		{gh(GitHubConfig{WebhookSecret: "s"}), "a token or a GitHub App"},
		{gh(GitHubConfig{Token: "t", WebhookSecret: "s", App: &GitHubApp{}}), "not both"},
		{gh(GitHubConfig{Token: "t", WebhookSecret: "s", APIBase: "api.github.com"}), "not an http(s) URL"},
		{gh(GitHubConfig{Token: "t", WebhookSecret: "s", APIBase: "https://user:pw@ghe/api/v3"}), "must not contain credentials"},
		{gh(GitHubConfig{Token: "t", WebhookSecret: "s", APIBase: "ftp://ghe/api/v3"}), "not an http(s) URL"},
		{gh(GitHubConfig{WebhookSecret: "s", App: &GitHubApp{InstallationID: 1, PrivateKeyPEM: key}}), "app_id is missing"},
		{gh(GitHubConfig{WebhookSecret: "s", App: &GitHubApp{AppID: "1", PrivateKeyPEM: key}}), "installation_id is missing"},
		{gh(GitHubConfig{WebhookSecret: "s", App: &GitHubApp{AppID: "1", InstallationID: 1, PrivateKeyPEM: "not a key"}}), "not a PEM block"},
		{gh(GitHubConfig{WebhookSecret: "s", App: &GitHubApp{AppID: "1", InstallationID: 1, PrivateKeyPEM: "-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"}}), "could not be read"},
		{gt(GiteaConfig{Token: "t", WebhookSecret: "s"}), "api_base is missing"},
		{gt(GiteaConfig{APIBase: "https://g", WebhookSecret: "s"}), "a token is needed"},
		{gt(GiteaConfig{APIBase: "https://g", Token: "t"}), "webhook secret is missing"},
		{ge(GenericConfig{}), "auth.type is missing"},
		{ge(GenericConfig{Auth: GenericAuth{Type: "none"}}), `"none" is not hmac or bearer`},
		{ge(GenericConfig{Auth: GenericAuth{Type: AuthHMAC}}), "hmac secret is missing"},
		{ge(GenericConfig{Auth: GenericAuth{Type: AuthHMAC, Secret: "s", Header: "Bad Header:"}}), "not a valid HTTP header name"},
		{ge(GenericConfig{Auth: GenericAuth{Type: AuthBearer}}), "bearer token is missing"},
		{ge(GenericConfig{Auth: hmac, CloneURL: "git.example.com:acme/app"}), "clone_url"},
		{ge(GenericConfig{Auth: hmac, CloneURL: "-uhttps://x"}), "not a URL"},
		{ge(GenericConfig{Auth: hmac, CloneURL: "https://u:pw@host/a.git"}), "must not contain a password"},
		{ge(GenericConfig{Auth: hmac, CloneURL: "file://relative/path"}), "absolute path"},
		{ge(GenericConfig{Auth: hmac, DefaultBranch: "bad..branch"}), "not a valid branch"},
		{ge(GenericConfig{Auth: hmac, CloneUsername: "u"}), "both clone_username and clone_password"},
		{&Source{Name: "ge", Kind: kiln.SourceGeneric, Generic: &GenericConfig{CloneURL: "https://h/a.git", Auth: hmac}}, "repository is missing"},
		{lc(""), "path is missing"},
		{lc("srv/git/app"), "is relative"},
		{lc("/srv/../etc"), "not clean"},
	}
	for _, c := range bad {
		err := c.src.Validate()
		if kiln.ErrorCode(err) != kiln.CodeInvalid || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want invalid containing %q", c.src, err, c.want)
		}
		if err != nil && (strings.Contains(err.Error(), "BEGIN RSA") || strings.Contains(err.Error(), "pw@")) {
			t.Errorf("%s: the error repeats a secret: %v", c.src, err)
		}
	}
}

func TestSourceJSONAndRedacted(t *testing.T) {
	key := pkcs1PEM(rsaTestKey(t))
	src := Source{Name: "gh", Kind: kiln.SourceGitHub, GitHub: &GitHubConfig{WebhookSecret: "whsec", App: &GitHubApp{AppID: "1", InstallationID: 2, PrivateKeyPEM: key}}}
	raw, err := json.Marshal(src)
	if err != nil {
		t.Fatal(err)
	}
	var back Source
	if err := json.Unmarshal(raw, &back); err != nil || back.Validate() != nil || back.GitHub.App.PrivateKeyPEM != key {
		t.Fatalf("round trip: %v %v", err, back.Validate())
	}
	red := src.Redacted()
	out, _ := json.Marshal(red)
	if strings.Contains(string(out), "whsec") || strings.Contains(string(out), "PRIVATE KEY") || !strings.Contains(string(out), Redaction) {
		t.Errorf("redacted JSON: %s", out)
	}
	if src.GitHub.WebhookSecret != "whsec" || src.GitHub.App.PrivateKeyPEM != key {
		t.Error("Redacted changed the original")
	}
	for _, s := range []Source{*gtSource, *hmSource, *brSource, *lcSource} {
		out, _ := json.Marshal(s.Redacted())
		for _, secret := range []string{string(testSecret), "bearer-tok", `"token":"t"`} {
			if strings.Contains(string(out), secret) {
				t.Errorf("%s redacted still holds %q: %s", s.Name, secret, out)
			}
		}
	}
}
