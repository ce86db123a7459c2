package cli

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// addCloneAndForkFlags declares the flags of a token source's clone
// credential and of a source's fork policy (add and update share them).
func (f *sourceFlags) addCloneAndForkFlags(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.cloneTokenEnv, "clone-token-env", "", "github, gitea: an environment variable holding the read-only token agents clone with")
	fs.StringVar(&f.cloneTokenFile, "clone-token-file", "", "github, gitea: a file holding the read-only token agents clone with")
	fs.StringVar(&f.cloneSSHKeyFile, "clone-ssh-key-file", "", "github, gitea: a read-only deploy key (private key file) agents clone with over ssh")
	fs.StringVar(&f.cloneKnownHosts, "clone-known-hosts-file", "", "github, gitea: a known_hosts file pinning the ssh host's keys")
	fs.StringVar(&f.cloneSSHURL, "clone-ssh-url", "", "github, gitea: where agents clone over ssh, ssh://USER@HOST[:PORT] (default ssh://git@ the web host)")
	fs.StringVar(&f.forkPolicy, "fork-pull-requests", "", "github, gitea: approve (the default), run or deny pull requests from forks")
	fs.StringSliceVar(&f.forkLabels, "fork-labels", nil, "github, gitea: mandatory agent labels fork pull requests' jobs may use (default none)")
}

// clone builds a token source's clone credential from the flags; nil
// when none is given.
func (f *sourceFlags) clone(e *env) (*forge.CloneConfig, error) {
	token, err := readSecret(e, f.cloneTokenEnv, f.cloneTokenFile, "clone-token")
	if err != nil {
		return nil, err
	}
	var key, hosts string
	if f.cloneSSHKeyFile != "" {
		if key, err = readSecret(e, "", f.cloneSSHKeyFile, "clone-ssh-key"); err != nil {
			return nil, err
		}
	}
	if f.cloneKnownHosts != "" {
		if hosts, err = readSecret(e, "", f.cloneKnownHosts, "clone-known-hosts"); err != nil {
			return nil, err
		}
	}
	c := &forge.CloneConfig{Token: token, Username: f.cloneUsername, SSHKey: key, KnownHosts: hosts, SSHURL: f.cloneSSHURL}
	if *c == (forge.CloneConfig{}) {
		return nil, nil
	}
	return c, nil
}

// printWarnings shows what the server said about a source's credentials.
func printWarnings(e *env, warnings []string) {
	for _, w := range warnings {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}
}

func newSourcesUpdateCmd(e *env, cf *clientFlags) *cobra.Command {
	var f sourceFlags
	var noClone bool
	cmd := &cobra.Command{
		Use:   "update NAME [flags]",
		Short: "Change a source's settings, credentials or fork policy",
		Long: `update changes the settings of source NAME that the flags name, and only those: it takes
the flags of "kiln sources add" but --kind (a source keeps its kind and name). Secrets are
read from environment variables or files as add reads them; a secret no flag names is
kept. --remove-clone-credential drops a token source's clone credential (agents then clone
anonymously). kiln warns, as add does, when the source's credentials put agents at risk.`,
		Example: "  kiln sources update gh --fork-pull-requests deny\n" +
			"  kiln sources update gh --fork-labels gpu --fork-pull-requests approve\n" +
			"  kiln sources update gh --public-badges\n" +
			"  CLONE_TOKEN=… kiln sources update gh --clone-token-env CLONE_TOKEN\n" +
			"  kiln sources update forgejo --clone-ssh-key-file deploy_key --clone-known-hosts-file known_hosts\n" +
			"  kiln sources update gh-app --checks",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !settingsGiven(cmd) {
				return usageErrorf("nothing to change: name a setting to change (kiln sources update --help lists them)")
			}
			if cmd.Flags().Changed("kind") {
				return usageErrorf("a source's kind cannot change; remove it and add it again")
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			cur, err := c.Source(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			f.kind = string(cur.Kind)
			if cur.Generic != nil && !cmd.Flags().Changed("auth") {
				f.auth = cur.Generic.Auth.Type
			}
			if noClone && cur.Kind != kiln.SourceGitHub && cur.Kind != kiln.SourceGitea {
				return usageErrorf("--remove-clone-credential is not a setting of %s sources", cur.Kind)
			}
			patch, err := f.patch(cmd, e, args[0], noClone)
			if err != nil {
				return err
			}
			upd, err := c.UpdateSource(cmd.Context(), args[0], patch)
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(e.stdout, "updated %s source %s\n", upd.Kind, upd.Name)
			printWarnings(e, upd.Warnings)
			return nil
		},
	}
	addSourceSettingFlags(cmd, &f)
	cmd.Flags().StringVar(&f.kind, "kind", "", "not changeable (refused)")
	_ = cmd.Flags().MarkHidden("kind")
	cmd.Flags().BoolVar(&noClone, "remove-clone-credential", false, "github, gitea: drop the clone credential")
	return cmd
}

// settingsGiven reports whether a flag of the command itself was given
// (the client's flags, --server and the like, belong to its parent).
func settingsGiven(cmd *cobra.Command) bool {
	n := 0
	cmd.LocalFlags().VisitAll(func(fl *pflag.Flag) {
		if cmd.Flags().Changed(fl.Name) {
			n++
		}
	})
	return n > 0
}

// toMap is v as a generic JSON object.
func toMap(v any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

// patch is the JSON merge patch of the settings the flags name: the
// flags are read into a source of the current kind as add reads them, and
// the members of the flags given are taken from it.
func (f *sourceFlags) patch(cmd *cobra.Command, e *env, name string, noClone bool) (map[string]any, error) {
	src, err := f.source(cmd, e, name)
	if err != nil {
		return nil, err
	}
	full, err := toMap(src)
	if err != nil {
		return nil, err
	}
	kind := string(src.Kind)
	block, _ := full[kind].(map[string]any)
	patch, out := map[string]any{}, map[string]any{}
	clone := map[string]any{}
	changed := cmd.Flags().Changed
	take := func(dst map[string]any, key string) {
		if v, ok := block[key]; ok {
			dst[key] = v
		}
	}
	for flag, key := range map[string]string{"api-base": "api_base", "web-base": "web_base", "token-env": "token", "token-file": "token",
		"repository": "repository", "clone-url": "clone_url", "default-branch": "default_branch",
		"clone-password-env": "clone_password", "clone-password-file": "clone_password", "path": "path"} {
		if changed(flag) {
			take(out, key)
		}
	}
	if changed("secret-env") || changed("secret-file") {
		if kind == string(kiln.SourceGeneric) {
			auth, _ := block["auth"].(map[string]any)
			out["auth"] = map[string]any{"secret": auth["secret"], "token": auth["token"]}
		} else {
			take(out, "webhook_secret")
		}
	}
	if changed("auth") || changed("signature-header") {
		a, _ := out["auth"].(map[string]any)
		if a == nil {
			a = map[string]any{}
		}
		auth, _ := block["auth"].(map[string]any)
		for flag, key := range map[string]string{"auth": "type", "signature-header": "header"} {
			if changed(flag) {
				a[key] = auth[key]
			}
		}
		out["auth"] = a
	}
	if changed("app-id") || changed("installation-id") || changed("private-key-file") {
		app, _ := block["app"].(map[string]any)
		a := map[string]any{}
		for flag, key := range map[string]string{"app-id": "app_id", "installation-id": "installation_id", "private-key-file": "private_key_pem"} {
			if changed(flag) {
				a[key] = app[key]
			}
		}
		out["app"] = a
	}
	if changed("clone-username") {
		if kind == string(kiln.SourceGeneric) {
			take(out, "clone_username")
		} else {
			clone["username"] = f.cloneUsername
		}
	}
	cc, _ := block["clone"].(map[string]any)
	switch {
	case changed("clone-token-env") || changed("clone-token-file"):
		// A token replaces an ssh key.
		clone["token"], clone["ssh_key"], clone["known_hosts"], clone["ssh_url"] = cc["token"], nil, nil, nil
	case changed("clone-ssh-key-file"):
		clone["ssh_key"], clone["token"], clone["username"] = cc["ssh_key"], nil, nil
	}
	if changed("clone-known-hosts-file") {
		clone["known_hosts"] = cc["known_hosts"]
	}
	if changed("clone-ssh-url") {
		clone["ssh_url"] = f.cloneSSHURL
	}
	switch {
	case noClone && len(clone) > 0:
		return nil, usageErrorf("--remove-clone-credential goes with no other --clone-* flag")
	case noClone:
		out["clone"] = nil
	case len(clone) > 0:
		out["clone"] = clone
	}
	if changed("checks") {
		out["checks"] = f.checks
	}
	if len(out) > 0 {
		patch[kind] = out
	}
	if changed("fork-pull-requests") {
		patch["fork_pull_requests"] = f.forkPolicy
	}
	if changed("public-badges") {
		patch["public_badges"] = f.publicBadges
	}
	if changed("fork-labels") {
		labels := []string{}
		for _, l := range f.forkLabels {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		patch["fork_labels"] = labels
	}
	return patch, nil
}
