package forge

import (
	"net/url"
	"strings"

	"github.com/kilnci/kiln"
)

// CloneConfig is the credential agents clone a GitHub or Gitea token
// source's repositories with. The source's own token (which reads
// workflows and posts statuses, and can usually push) never goes to an
// agent: a step's code has run on that host, and the next job's may read
// what the checkout leaves behind. Give a read-only token here (a
// fine-grained token with contents: read, a Gitea token with
// read:repository) or a deploy key; with none, agents clone anonymously,
// which is enough for public repositories.
type CloneConfig struct {
	// Token authenticates https fetches as the password of Username.
	Token string `json:"token,omitempty"`
	// Username goes with Token: default x-access-token (GitHub) or kiln
	// (Gitea, which reads only the token).
	Username string `json:"username,omitempty"`
	// SSHKey is a private key (a read-only deploy key) for ssh fetches;
	// KnownHosts pins the server's host keys (ssh then refuses any
	// other), and SSHURL is where repositories are fetched over ssh:
	// ssh://git@HOST[:PORT] (default ssh://git@ and the web host).
	SSHKey     string `json:"ssh_key,omitempty"`
	KnownHosts string `json:"known_hosts,omitempty"`
	SSHURL     string `json:"ssh_url,omitempty"`
}

func (c *CloneConfig) validate() error {
	switch {
	case c.Token != "" && c.SSHKey != "":
		return kiln.Errorf(kiln.CodeInvalid, "give the clone credential as a token or as an ssh key, not both")
	case c.Token == "" && c.SSHKey == "":
		return kiln.Errorf(kiln.CodeInvalid, "the clone settings need a token or an ssh key")
	case c.Username != "" && c.Token == "":
		return kiln.Errorf(kiln.CodeInvalid, "a clone username goes with a clone token")
	case (c.KnownHosts != "" || c.SSHURL != "") && c.SSHKey == "":
		return kiln.Errorf(kiln.CodeInvalid, "clone known_hosts and ssh_url go with a clone ssh key")
	case c.SSHKey != "" && !strings.Contains(c.SSHKey, "PRIVATE KEY-----"):
		return kiln.Errorf(kiln.CodeInvalid, "the clone ssh key is not a private key file (PEM or OpenSSH)")
	}
	if c.SSHURL != "" {
		u, err := url.Parse(c.SSHURL)
		if err != nil || u.Scheme != "ssh" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return kiln.Errorf(kiln.CodeInvalid, "clone ssh_url %q must be ssh://USER@HOST or ssh://USER@HOST:PORT", c.SSHURL)
		}
	}
	return nil
}

// redacted blanks the secrets of c.
func (c *CloneConfig) redacted() *CloneConfig {
	if c == nil {
		return nil
	}
	r := *c
	r.Token, r.SSHKey = blank(r.Token), blank(r.SSHKey)
	return &r
}

// cloneWith is the read-only checkout of repo at web (https) for a token
// source: its clone credential, or none. defaultUser is the forge's user
// name for a token; source names the source in the hint an anonymous
// clone carries.
func cloneWith(c *CloneConfig, web *url.URL, repo, defaultUser, source string) (CloneInfo, error) {
	if _, _, err := splitRepo(repo); err != nil {
		return CloneInfo{}, err
	}
	https := web.String() + "/" + repo + ".git"
	switch {
	case c == nil:
		return CloneInfo{URL: https, Hint: anonymousHint(source)}, nil
	case c.SSHKey != "":
		base := c.SSHURL
		if base == "" {
			base = "ssh://git@" + web.Hostname()
		}
		return CloneInfo{URL: strings.TrimSuffix(base, "/") + "/" + repo + ".git", SSHKey: c.SSHKey, KnownHosts: c.KnownHosts}, nil
	}
	return CloneInfo{URL: https, Username: cmpOr(c.Username, defaultUser), Password: c.Token}, nil
}

// anonymousHint is what the agent adds to a failed anonymous checkout.
func anonymousHint(source string) string {
	return "kiln never gives agents a source's own token, and source " + source +
		" has no clone credential, so this checkout was anonymous; a private repository needs one: " +
		"kiln sources update " + source + " --clone-token-env VAR (or --clone-token-file FILE, or --clone-ssh-key-file FILE)"
}
