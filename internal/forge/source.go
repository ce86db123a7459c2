package forge

import (
	"fmt"
	"path/filepath"

	"github.com/kilnci/kiln"
)

// DefaultGitHubAPI is the API base of github.com.
const DefaultGitHubAPI = "https://api.github.com"

// DefaultSignatureHeader is the header a generic HMAC source reads.
const DefaultSignatureHeader = "X-Signature-256"

// Source is one configured source as the API stores it (JSON). Name is what
// the webhook URL names (/webhook/{kind}/{name}); exactly the config block
// of Kind is set.
type Source struct {
	Name    string          `json:"name"`
	Kind    kiln.SourceKind `json:"kind"`
	GitHub  *GitHubConfig   `json:"github,omitempty"`
	Gitea   *GiteaConfig    `json:"gitea,omitempty"`
	Generic *GenericConfig  `json:"generic,omitempty"`
	Local   *LocalConfig    `json:"local,omitempty"`
}

// GitHubConfig connects github.com or GitHub Enterprise. Authenticate with
// either a token (personal access token, fine-grained or classic) or a
// GitHub App installation.
type GitHubConfig struct {
	// APIBase is the REST API root: https://api.github.com (the default) or
	// https://HOST/api/v3 for GitHub Enterprise Server.
	APIBase string `json:"api_base,omitempty"`
	// WebBase is where repositories are cloned from; derived from APIBase
	// when empty (api.github.com → github.com, HOST/api/v3 → HOST).
	WebBase       string     `json:"web_base,omitempty"`
	Token         string     `json:"token,omitempty"`
	App           *GitHubApp `json:"app,omitempty"`
	WebhookSecret string     `json:"webhook_secret"`
	// Clone is the read-only credential agents clone with (a token
	// source's; a GitHub App mints its own).
	Clone *CloneConfig `json:"clone,omitempty"`
	// Checks posts a GitHub check run per workflow and event instead of a
	// commit status (kiln sources add --checks). Only a GitHub App may: it
	// needs the checks: write permission.
	Checks bool `json:"checks,omitempty"`
}

// GitHubApp names a GitHub App installation; kiln mints a JWT with the
// App's private key and exchanges it for installation tokens.
type GitHubApp struct {
	// AppID is the App's numeric ID or its client ID (used as the JWT issuer).
	AppID          string `json:"app_id"`
	InstallationID int64  `json:"installation_id"`
	PrivateKeyPEM  string `json:"private_key_pem"`
}

// GiteaConfig connects a Gitea or Forgejo instance.
type GiteaConfig struct {
	// APIBase is the instance's root URL (https://gitea.example.com); a
	// trailing /api/v1 is accepted and removed.
	APIBase       string `json:"api_base"`
	Token         string `json:"token"`
	WebhookSecret string `json:"webhook_secret"`
	// Clone is the read-only credential agents clone with.
	Clone *CloneConfig `json:"clone,omitempty"`
}

// GenericConfig is a source with no forge API: a signed webhook names what
// happened and kiln fetches the code with git from CloneURL.
type GenericConfig struct {
	Repository    string `json:"repository"` // the name workflows see as event.repository
	CloneURL      string `json:"clone_url"`  // https://, ssh://, git:// or file://
	DefaultBranch string `json:"default_branch,omitempty"`
	// CloneUsername and ClonePassword authenticate https fetches; they are
	// sent in a header, never put in the URL.
	CloneUsername string      `json:"clone_username,omitempty"`
	ClonePassword string      `json:"clone_password,omitempty"`
	Auth          GenericAuth `json:"auth"`
}

// GenericAuth is how a generic source proves a delivery is genuine.
type GenericAuth struct {
	Type   string `json:"type"`             // "hmac" or "bearer"
	Secret string `json:"secret,omitempty"` // hmac: the shared secret
	// Header is where the hmac signature is (default X-Signature-256); its
	// value is "sha256=<hex>" (a bare <hex> is also accepted).
	Header string `json:"header,omitempty"`
	Token  string `json:"token,omitempty"` // bearer: the expected token
}

// Generic auth types.
const (
	AuthHMAC   = "hmac"
	AuthBearer = "bearer"
)

// LocalConfig is a git repository (bare or not) on the server's host.
type LocalConfig struct {
	Path string `json:"path"`
}

var nameRE = lazyRegexp(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// Validate reports the first problem with s as a plain sentence
// (kiln.CodeInvalid), or nil. It does no I/O.
func (s *Source) Validate() error {
	if !nameRE().MatchString(s.Name) {
		return kiln.Errorf(kiln.CodeInvalid, "source name %q must be 1 to 63 lower-case letters, digits, dots, dashes or underscores, starting with a letter or digit", s.Name)
	}
	set := 0
	for _, b := range []bool{s.GitHub != nil, s.Gitea != nil, s.Generic != nil, s.Local != nil} {
		if b {
			set++
		}
	}
	if set > 1 {
		return kiln.Errorf(kiln.CodeInvalid, "source %s has the settings of more than one kind; give only the %s block", s.Name, s.Kind)
	}
	var err error
	switch s.Kind {
	case kiln.SourceGitHub:
		err = needBlock(s.GitHub != nil, s.Kind)
		if err == nil {
			err = s.GitHub.validate()
		}
	case kiln.SourceGitea:
		err = needBlock(s.Gitea != nil, s.Kind)
		if err == nil {
			err = s.Gitea.validate()
		}
	case kiln.SourceGeneric:
		err = needBlock(s.Generic != nil, s.Kind)
		if err == nil {
			err = s.Generic.validate()
		}
	case kiln.SourceLocal:
		err = needBlock(s.Local != nil, s.Kind)
		if err == nil {
			err = s.Local.validate()
		}
	default:
		return kiln.Errorf(kiln.CodeInvalid, "source kind %q is not one of github, gitea, generic, local", s.Kind)
	}
	if err != nil {
		return kiln.Errorf(kiln.CodeInvalid, "source %s: %s", s.Name, kiln.ErrorMessage(err))
	}
	return nil
}

func needBlock(ok bool, k kiln.SourceKind) error {
	if !ok {
		return kiln.Errorf(kiln.CodeInvalid, "a %s source needs its %q settings", k, string(k))
	}
	return nil
}

func (c *GitHubConfig) validate() error {
	if err := checkBaseURL("api_base", c.APIBase, true); err != nil {
		return err
	}
	if err := checkBaseURL("web_base", c.WebBase, true); err != nil {
		return err
	}
	if c.WebhookSecret == "" {
		return kiln.Errorf(kiln.CodeInvalid, "the webhook secret is missing; GitHub signs every delivery with it and kiln refuses unsigned ones")
	}
	switch {
	case c.Token != "" && c.App != nil:
		return kiln.Errorf(kiln.CodeInvalid, "give either a token or a GitHub App, not both")
	case c.Token == "" && c.App == nil:
		return kiln.Errorf(kiln.CodeInvalid, "a token or a GitHub App is needed to read workflow files and post statuses")
	case c.Checks && c.App == nil:
		return kiln.Errorf(kiln.CodeInvalid, "checks (--checks) needs a GitHub App source: GitHub lets only Apps create check runs; a token source posts commit statuses")
	case c.App != nil && c.Clone != nil:
		return kiln.Errorf(kiln.CodeInvalid, "a GitHub App source takes no clone credential: it mints a read-only token for each checkout")
	case c.App != nil:
		return c.App.validate()
	case c.Clone != nil:
		return c.Clone.validate()
	}
	return nil
}

func (a *GitHubApp) validate() error {
	if a.AppID == "" {
		return kiln.Errorf(kiln.CodeInvalid, "the GitHub App's app_id is missing")
	}
	if a.InstallationID <= 0 {
		return kiln.Errorf(kiln.CodeInvalid, "the GitHub App's installation_id is missing; it is the number at the end of the installation's settings URL")
	}
	if _, err := parseRSAKey(a.PrivateKeyPEM); err != nil {
		return err
	}
	return nil
}

func (c *GiteaConfig) validate() error {
	if c.APIBase == "" {
		return kiln.Errorf(kiln.CodeInvalid, "api_base is missing; give the instance's address, like https://gitea.example.com")
	}
	if err := checkBaseURL("api_base", c.APIBase, true); err != nil {
		return err
	}
	if c.WebhookSecret == "" {
		return kiln.Errorf(kiln.CodeInvalid, "the webhook secret is missing; Gitea signs every delivery with it and kiln refuses unsigned ones")
	}
	if c.Token == "" {
		return kiln.Errorf(kiln.CodeInvalid, "a token is needed to read workflow files and post statuses")
	}
	if c.Clone != nil {
		return c.Clone.validate()
	}
	return nil
}

func (c *GenericConfig) validate() error {
	if c.Repository == "" {
		return kiln.Errorf(kiln.CodeInvalid, "repository is missing; it is the name workflows see as event.repository")
	}
	if c.CloneURL == "" {
		return kiln.Errorf(kiln.CodeInvalid, "clone_url is missing; kiln reads workflow files by fetching from it")
	}
	if err := checkCloneURL(c.CloneURL); err != nil {
		return err
	}
	if c.DefaultBranch != "" && !validRefName(c.DefaultBranch) {
		return kiln.Errorf(kiln.CodeInvalid, "default_branch %q is not a valid branch name", c.DefaultBranch)
	}
	if (c.CloneUsername == "") != (c.ClonePassword == "") {
		return kiln.Errorf(kiln.CodeInvalid, "give both clone_username and clone_password, or neither")
	}
	switch c.Auth.Type {
	case AuthHMAC:
		if c.Auth.Secret == "" {
			return kiln.Errorf(kiln.CodeInvalid, "the hmac secret is missing")
		}
		if c.Auth.Header != "" && !validHeaderName(c.Auth.Header) {
			return kiln.Errorf(kiln.CodeInvalid, "signature header %q is not a valid HTTP header name", c.Auth.Header)
		}
	case AuthBearer:
		if c.Auth.Token == "" {
			return kiln.Errorf(kiln.CodeInvalid, "the bearer token is missing")
		}
	case "":
		return kiln.Errorf(kiln.CodeInvalid, "auth.type is missing; use hmac or bearer (kiln takes no unauthenticated webhooks)")
	default:
		return kiln.Errorf(kiln.CodeInvalid, "auth.type %q is not hmac or bearer", c.Auth.Type)
	}
	return nil
}

func (c *LocalConfig) validate() error {
	if c.Path == "" {
		return kiln.Errorf(kiln.CodeInvalid, "path is missing; give the absolute path of a git repository on the server's host")
	}
	if !filepath.IsAbs(c.Path) {
		return kiln.Errorf(kiln.CodeInvalid, "path %q is relative; give an absolute path", c.Path)
	}
	if filepath.Clean(c.Path) != c.Path && filepath.Clean(c.Path)+"/" != c.Path {
		return kiln.Errorf(kiln.CodeInvalid, "path %q is not clean; write it as %q", c.Path, filepath.Clean(c.Path))
	}
	return nil
}

// Redacted returns a copy of s with every secret blanked, for API answers
// and logs.
func (s Source) Redacted() Source {
	if s.GitHub != nil {
		c := *s.GitHub
		c.Token, c.WebhookSecret = blank(c.Token), blank(c.WebhookSecret)
		if c.App != nil {
			a := *c.App
			a.PrivateKeyPEM = blank(a.PrivateKeyPEM)
			c.App = &a
		}
		c.Clone = c.Clone.redacted()
		s.GitHub = &c
	}
	if s.Gitea != nil {
		c := *s.Gitea
		c.Token, c.WebhookSecret = blank(c.Token), blank(c.WebhookSecret)
		c.Clone = c.Clone.redacted()
		s.Gitea = &c
	}
	if s.Generic != nil {
		c := *s.Generic
		c.ClonePassword = blank(c.ClonePassword)
		c.Auth.Secret, c.Auth.Token = blank(c.Auth.Secret), blank(c.Auth.Token)
		s.Generic = &c
	}
	if s.Local != nil {
		c := *s.Local
		s.Local = &c
	}
	return s
}

// Redaction replaces a set secret in Redacted output.
const Redaction = "(redacted)"

func blank(s string) string {
	if s == "" {
		return ""
	}
	return Redaction
}

// String describes the source for logs.
func (s *Source) String() string { return fmt.Sprintf("%s source %s", s.Kind, s.Name) }
