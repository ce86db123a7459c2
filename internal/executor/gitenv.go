package executor

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// gitEnvDrop are variables of the agent's environment that would point git
// somewhere else than the workspace or feed it configuration.
var gitEnvDrop = []string{
	"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
	"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE",
	"GIT_CONFIG", "GIT_CONFIG_PARAMETERS", "GIT_CONFIG_COUNT", "GIT_ASKPASS", "SSH_ASKPASS",
}

// gitEnv is the environment of the checkout's git commands. Credentials
// travel only here and in files under the job's private meta directory:
//
//   - HTTP(S): an "Authorization: Basic …" header scoped to the clone
//     URL's origin, given as command-line-scope configuration through
//     GIT_CONFIG_COUNT/GIT_CONFIG_KEY_n/GIT_CONFIG_VALUE_n;
//   - SSH: GIT_SSH_COMMAND naming a 0600 key file and, when given, a
//     known_hosts file that pins the host keys;
//   - local repositories owned by another user: safe.directory entries in
//     a private global configuration file (git does not pass command-line
//     configuration on to the upload-pack it runs for a local fetch) that
//     includes the agent user's own global configuration.
//
// Credential helpers, prompts, hooks and the fsmonitor are switched off.
func (e *Execution) gitEnv(ws *workspace, c *Checkout, safeDirs []string) ([]string, error) {
	env := newEnvMap(e.x.baseEnv)
	for _, k := range gitEnvDrop {
		delete(env, k)
	}
	for k := range env {
		if strings.HasPrefix(k, "GIT_CONFIG_KEY_") || strings.HasPrefix(k, "GIT_CONFIG_VALUE_") {
			delete(env, k)
		}
	}
	env["GIT_TERMINAL_PROMPT"] = "0"
	env["GIT_ALLOW_PROTOCOL"] = "file:git:http:https:ssh"
	env["GIT_OPTIONAL_LOCKS"] = "0"

	config := [][2]string{
		{"credential.helper", ""},
		{"core.fsmonitor", "false"},
		{"core.hooksPath", os.DevNull},
		{"advice.detachedHead", "false"},
		{"init.defaultBranch", "kiln"},
		{"protocol.version", "2"},
	}
	if a := httpAuth(c); a != nil {
		config = append(config, [2]string{"http." + urlOrigin(c.URL) + ".extraHeader", "Authorization: Basic " + basicAuth(a)})
	}
	env["GIT_CONFIG_COUNT"] = strconv.Itoa(len(config))
	for i, kv := range config {
		env[fmt.Sprintf("GIT_CONFIG_KEY_%d", i)] = kv[0]
		env[fmt.Sprintf("GIT_CONFIG_VALUE_%d", i)] = kv[1]
	}

	if a := c.Auth; a != nil && len(a.SSHKey) > 0 {
		cmd, err := writeSSHFiles(ws, a)
		if err != nil {
			return nil, err
		}
		env["GIT_SSH_COMMAND"] = cmd
		env["GIT_SSH_VARIANT"] = "ssh"
	}
	if len(safeDirs) > 0 {
		p, err := writeSafeConfig(ws, env["HOME"], env["XDG_CONFIG_HOME"], safeDirs)
		if err != nil {
			return nil, err
		}
		env["GIT_CONFIG_GLOBAL"] = p
	}
	return env.list(), nil
}

// httpAuth is the HTTP(S) credential of a checkout: Auth, or else a
// password embedded in the URL.
func httpAuth(c *Checkout) *GitAuth {
	if !isHTTPURL(c.URL) {
		return nil
	}
	if c.Auth != nil && c.Auth.Password != "" {
		return c.Auth
	}
	if p := urlPassword(c.URL); p != "" {
		u, _ := url.Parse(c.URL)
		return &GitAuth{Username: u.User.Username(), Password: p}
	}
	return nil
}

// basicAuth is the credential of an Authorization: Basic header.
func basicAuth(a *GitAuth) string {
	user := a.Username
	if user == "" {
		user = "x-access-token"
	}
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + a.Password))
}

// writeSSHFiles stores the key (and known hosts) in meta and returns the
// GIT_SSH_COMMAND that uses them.
func writeSSHFiles(ws *workspace, a *GitAuth) (string, error) {
	key := a.SSHKey
	if len(key) > 0 && key[len(key)-1] != '\n' {
		key = append(append([]byte(nil), key...), '\n') // ssh rejects a key without its last newline
	}
	keyPath, err := ws.writeMeta("ssh-key", key, 0o600)
	if err != nil {
		return "", fmt.Errorf("write the SSH key: %w", err)
	}
	cmd := "ssh -i " + shellQuote(keyPath) + " -o IdentitiesOnly=yes -o IdentityAgent=none -o BatchMode=yes -o StrictHostKeyChecking=yes"
	if len(a.KnownHosts) > 0 {
		khPath, err := ws.writeMeta("known_hosts", a.KnownHosts, 0o600)
		if err != nil {
			return "", fmt.Errorf("write the SSH known hosts: %w", err)
		}
		cmd += " -o UserKnownHostsFile=" + shellQuote(khPath) + " -o GlobalKnownHostsFile=/dev/null"
	}
	return cmd, nil
}

// writeSafeConfig writes the private global git configuration: the agent
// user's own global files included, then the safe directories.
func writeSafeConfig(ws *workspace, home, xdg string, safeDirs []string) (string, error) {
	var b strings.Builder
	var globals []string
	if xdg != "" {
		globals = append(globals, filepath.Join(xdg, "git", "config"))
	} else if home != "" {
		globals = append(globals, filepath.Join(home, ".config", "git", "config"))
	}
	if home != "" {
		globals = append(globals, filepath.Join(home, ".gitconfig"))
	}
	for _, p := range globals {
		if _, err := os.Stat(p); err == nil {
			fmt.Fprintf(&b, "[include]\n\tpath = %s\n", gitConfigQuote(p))
		}
	}
	b.WriteString("[safe]\n")
	for _, d := range safeDirs {
		fmt.Fprintf(&b, "\tdirectory = %s\n", gitConfigQuote(d))
	}
	p, err := ws.writeMeta("gitconfig", []byte(b.String()), 0o600)
	if err != nil {
		return "", fmt.Errorf("write the git configuration: %w", err)
	}
	return p, nil
}

func gitConfigQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"`
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func isHTTPURL(raw string) bool {
	return strings.HasPrefix(raw, "https://") || strings.HasPrefix(raw, "http://")
}

// urlOrigin is scheme://host[:port]/ of an HTTP(S) URL, the scope of the
// credential header.
func urlOrigin(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Scheme + "://" + u.Host + "/"
}

// urlPassword is the password embedded in an HTTP(S) URL, if any.
func urlPassword(raw string) string {
	if !isHTTPURL(raw) {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// cleanURL drops credentials embedded in an HTTP(S) URL: they are passed
// to git in its environment instead.
func cleanURL(raw string) string {
	if !isHTTPURL(raw) {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// localRepoPath is the directory a file:// URL or plain path names.
func localRepoPath(raw string) string {
	if strings.HasPrefix(raw, "file://") {
		u, err := url.Parse(raw)
		if err != nil {
			return ""
		}
		return u.Path
	}
	if filepath.IsAbs(raw) {
		return raw
	}
	return ""
}
