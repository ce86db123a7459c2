package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kilnci/kiln"
	"github.com/kilnci/kiln/internal/api"
	"github.com/kilnci/kiln/internal/forge"
	"github.com/spf13/cobra"
)

func newSourcesCmd(e *env) *cobra.Command {
	var cf clientFlags
	cmd := &cobra.Command{
		Use:   "sources",
		Short: "Add, update, list, show and remove sources; print or install a local source's hook",
		Long:  "sources manages the forges kiln receives events from (docs/sources.md describes each kind).",
		Args:  cobra.NoArgs,
	}
	addClientFlags(cmd, &cf)
	cmd.AddCommand(newSourcesAddCmd(e, &cf), newSourcesUpdateCmd(e, &cf), newSourcesListCmd(e, &cf), newSourcesShowCmd(e, &cf),
		newSourcesRemoveCmd(e, &cf), newSourcesHookCmd(e, &cf))
	return cmd
}

// sourceFlags are the settings `sources add` takes. Secrets are never
// flags (they would be in shell history and ps): each is read from a named
// environment variable or a file.
type sourceFlags struct {
	kind                                       string
	apiBase, webBase                           string
	tokenEnv, tokenFile, secretEnv, secretFile string
	appID                                      string
	installationID                             int64
	privateKeyFile                             string
	repository, cloneURL, defaultBranch        string
	auth, signatureHeader                      string
	cloneUsername, clonePassEnv, clonePassFile string
	path                                       string
	// Token sources' read-only clone credential, and the fork policy.
	cloneTokenEnv, cloneTokenFile                 string
	cloneSSHKeyFile, cloneKnownHosts, cloneSSHURL string
	forkPolicy                                    string
	forkLabels                                    []string
	publicBadges                                  bool
	checks                                        bool
}

// kindFlags says which kinds each setting belongs to.
var kindFlags = map[string][]kiln.SourceKind{
	"api-base": {kiln.SourceGitHub, kiln.SourceGitea}, "web-base": {kiln.SourceGitHub},
	"token-env": {kiln.SourceGitHub, kiln.SourceGitea}, "token-file": {kiln.SourceGitHub, kiln.SourceGitea},
	"app-id": {kiln.SourceGitHub}, "installation-id": {kiln.SourceGitHub}, "private-key-file": {kiln.SourceGitHub},
	"repository": {kiln.SourceGeneric}, "clone-url": {kiln.SourceGeneric}, "default-branch": {kiln.SourceGeneric},
	"auth": {kiln.SourceGeneric}, "signature-header": {kiln.SourceGeneric},
	"clone-username":     {kiln.SourceGeneric, kiln.SourceGitHub, kiln.SourceGitea},
	"clone-password-env": {kiln.SourceGeneric}, "clone-password-file": {kiln.SourceGeneric},
	"secret-env":      {kiln.SourceGitHub, kiln.SourceGitea, kiln.SourceGeneric},
	"secret-file":     {kiln.SourceGitHub, kiln.SourceGitea, kiln.SourceGeneric},
	"path":            {kiln.SourceLocal},
	"clone-token-env": {kiln.SourceGitHub, kiln.SourceGitea}, "clone-token-file": {kiln.SourceGitHub, kiln.SourceGitea},
	"clone-ssh-key-file": {kiln.SourceGitHub, kiln.SourceGitea}, "clone-known-hosts-file": {kiln.SourceGitHub, kiln.SourceGitea},
	"clone-ssh-url":      {kiln.SourceGitHub, kiln.SourceGitea},
	"fork-pull-requests": {kiln.SourceGitHub, kiln.SourceGitea}, "fork-labels": {kiln.SourceGitHub, kiln.SourceGitea},
	"checks": {kiln.SourceGitHub},
}

func newSourcesAddCmd(e *env, cf *clientFlags) *cobra.Command {
	var f sourceFlags
	cmd := &cobra.Command{
		Use:   "add NAME --kind github|gitea|generic|local",
		Short: "Add a source",
		Long: `add configures a source named NAME (lower-case letters, digits, dots, dashes, underscores).

Secrets are never given on the command line, where shell history and ps would keep them:
each is read from an environment variable you name (--token-env GITHUB_TOKEN) or from a
file (--token-file ~/.config/gh-token). The server answers with the source, secrets
redacted, and this command prints the webhook URL to give the forge.

  github   --secret-env/--secret-file (webhook secret), and --token-env/--token-file or a
           GitHub App (--app-id, --installation-id, --private-key-file); --api-base for
           GitHub Enterprise (https://HOST/api/v3)
  gitea    --api-base, --token-env/--token-file, --secret-env/--secret-file
  generic  --repository, --clone-url, --auth hmac|bearer with --secret-env/--secret-file
           (the HMAC secret or the bearer token), --signature-header, --default-branch,
           --clone-username with --clone-password-env/--clone-password-file
  local    --path (a git repository on the server's host)

github and gitea token sources also take the read-only credential agents clone with:
kiln never gives agents the source's own token (--token-*), which can usually push.
Give --clone-token-env/--clone-token-file (a fine-grained token with contents: read, a
Gitea token with read:repository; --clone-username for its user) or --clone-ssh-key-file
(a read-only deploy key, with --clone-known-hosts-file to pin the host's keys and
--clone-ssh-url ssh://git@HOST:PORT when ssh is not on the web host's port 22). Without
one, agents clone anonymously: enough for public repositories. kiln warns when the only
token it has can push, or when it cannot tell. A GitHub App mints a read-only token for
each checkout itself.

Pull requests from forks (github, gitea) follow --fork-pull-requests: approve (the
default) runs those of the repository's owners, members and collaborators at once and
holds the others' until "kiln runs approve"; run runs them all; deny ignores them. Their
jobs never go to agents with mandatory labels, except those named with --fork-labels.
See docs/security.md.

A GitHub App source with --checks posts a check run per workflow and event instead of a
commit status: the failing step, with the end of its log, and lint errors show as
annotations on the workflow file. The App needs the checks: write permission; when GitHub
refuses a check run kiln posts a commit status instead and says why on the run.

--public-badges lets anyone, logged in or not, fetch the status badge of each of the
source's workflows (PUBLIC_URL/badge/NAME/WORKFLOW.svg?branch=B): the state of its latest
run, and nothing else. Without it, badges answer 404. See docs/dashboard.md.`,
		Example: "  kiln sources add app --kind local --path /srv/git/app.git\n" +
			"  GH_TOKEN=… GH_HOOK=… kiln sources add gh --kind github --token-env GH_TOKEN --secret-env GH_HOOK\n" +
			"  kiln sources add forgejo --kind gitea --api-base https://git.example.com --token-file tok --secret-file hook",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := f.source(cmd, e, args[0])
			if err != nil {
				return err
			}
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			added, err := c.CreateSource(cmd.Context(), api.SourceRequest{Source: src,
				ForkPullRequests: kiln.ForkPolicy(f.forkPolicy), ForkLabels: f.forkLabels, PublicBadges: f.publicBadges})
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(e.stdout, "added %s source %s\n", added.Kind, added.Name)
			printWarnings(e, added.Warnings)
			if added.Kind == kiln.SourceLocal {
				fmt.Fprintf(e.stdout, "install its post-receive hook with: kiln sources hook %s --install\n", added.Name)
			} else {
				fmt.Fprintf(e.stdout, "webhook URL: %s/webhook/%s/%s\n", strings.TrimSuffix(cf.serverURL(e), "/"), added.Kind, added.Name)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&f.kind, "kind", "", "github, gitea, generic or local (required)")
	addSourceSettingFlags(cmd, &f)
	return cmd
}

// addSourceSettingFlags declares the settings add and update share.
func addSourceSettingFlags(cmd *cobra.Command, f *sourceFlags) {
	fs := cmd.Flags()
	fs.StringVar(&f.apiBase, "api-base", "", "the forge's API root (github: default https://api.github.com; gitea: the instance's URL)")
	fs.StringVar(&f.webBase, "web-base", "", "github: where repositories are cloned from (derived from --api-base)")
	fs.StringVar(&f.tokenEnv, "token-env", "", "an environment variable holding the forge API token")
	fs.StringVar(&f.tokenFile, "token-file", "", "a file holding the forge API token")
	fs.StringVar(&f.secretEnv, "secret-env", "", "an environment variable holding the webhook secret (generic: the HMAC secret or bearer token)")
	fs.StringVar(&f.secretFile, "secret-file", "", "a file holding the webhook secret (generic: the HMAC secret or bearer token)")
	fs.StringVar(&f.appID, "app-id", "", "github: the GitHub App's id or client id")
	fs.Int64Var(&f.installationID, "installation-id", 0, "github: the App installation's id")
	fs.StringVar(&f.privateKeyFile, "private-key-file", "", "github: the App's private key (PEM file)")
	fs.StringVar(&f.repository, "repository", "", "generic: the repository name workflows see (owner/name)")
	fs.StringVar(&f.cloneURL, "clone-url", "", "generic: where kiln fetches the code (https, ssh, git or file URL)")
	fs.StringVar(&f.defaultBranch, "default-branch", "", "generic: the default branch")
	fs.StringVar(&f.auth, "auth", "hmac", "generic: how deliveries prove themselves: hmac or bearer")
	fs.StringVar(&f.signatureHeader, "signature-header", "", "generic: the header holding the HMAC signature (default X-Signature-256)")
	fs.StringVar(&f.cloneUsername, "clone-username", "", "generic: the user for https fetches")
	fs.StringVar(&f.clonePassEnv, "clone-password-env", "", "generic: an environment variable holding the https fetch password")
	fs.StringVar(&f.clonePassFile, "clone-password-file", "", "generic: a file holding the https fetch password")
	fs.StringVar(&f.path, "path", "", "local: the git repository's path on the server's host")
	fs.BoolVar(&f.checks, "checks", false, "github (App sources): post check runs with annotations instead of commit statuses (--checks=false: statuses)")
	fs.BoolVar(&f.publicBadges, "public-badges", false, "anyone may fetch the source's status badges, /badge/NAME/WORKFLOW.svg (--public-badges=false: only 404s)")
	f.addCloneAndForkFlags(cmd)
}

// source builds the forge configuration from the flags.
func (f *sourceFlags) source(cmd *cobra.Command, e *env, name string) (forge.Source, error) {
	kind := kiln.SourceKind(f.kind)
	if !kind.Valid() {
		return forge.Source{}, usageErrorf("--kind must be github, gitea, generic or local")
	}
	for flag, kinds := range kindFlags {
		if cmd.Flags().Changed(flag) && !containsKind(kinds, kind) {
			return forge.Source{}, usageErrorf("--%s is not a setting of %s sources", flag, kind)
		}
	}
	src := forge.Source{Name: name, Kind: kind}
	token, err := readSecret(e, f.tokenEnv, f.tokenFile, "token")
	if err != nil {
		return src, err
	}
	secret, err := readSecret(e, f.secretEnv, f.secretFile, "secret")
	if err != nil {
		return src, err
	}
	switch kind {
	case kiln.SourceGitHub:
		clone, err := f.clone(e)
		if err != nil {
			return src, err
		}
		gh := &forge.GitHubConfig{APIBase: f.apiBase, WebBase: f.webBase, Token: token, WebhookSecret: secret, Clone: clone, Checks: f.checks}
		if f.appID != "" || f.installationID != 0 || f.privateKeyFile != "" {
			key, err := readSecret(e, "", f.privateKeyFile, "private-key")
			if err != nil {
				return src, err
			}
			gh.App = &forge.GitHubApp{AppID: f.appID, InstallationID: f.installationID, PrivateKeyPEM: key}
		}
		src.GitHub = gh
	case kiln.SourceGitea:
		clone, err := f.clone(e)
		if err != nil {
			return src, err
		}
		src.Gitea = &forge.GiteaConfig{APIBase: f.apiBase, Token: token, WebhookSecret: secret, Clone: clone}
	case kiln.SourceGeneric:
		pass, err := readSecret(e, f.clonePassEnv, f.clonePassFile, "clone-password")
		if err != nil {
			return src, err
		}
		g := &forge.GenericConfig{Repository: f.repository, CloneURL: f.cloneURL, DefaultBranch: f.defaultBranch,
			CloneUsername: f.cloneUsername, ClonePassword: pass, Auth: forge.GenericAuth{Type: f.auth, Header: f.signatureHeader}}
		if f.auth == forge.AuthBearer {
			g.Auth.Token = secret
		} else {
			g.Auth.Secret = secret
		}
		src.Generic = g
	case kiln.SourceLocal:
		p := f.path
		if p != "" {
			if abs, err := filepath.Abs(p); err == nil {
				p = abs
			}
		}
		src.Local = &forge.LocalConfig{Path: p}
	}
	return src, nil
}

func containsKind(ks []kiln.SourceKind, k kiln.SourceKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}

// readSecret reads a secret from the environment variable named envName or
// from file (at most one of them); "" when neither is given.
func readSecret(e *env, envName, file, what string) (string, error) {
	switch {
	case envName != "" && file != "":
		return "", usageErrorf("give --%s-env or --%s-file, not both", what, what)
	case envName != "":
		v := e.getenv(envName)
		if v == "" {
			return "", usageErrorf("--%s-env %s: that environment variable is empty or not set", what, envName)
		}
		return v, nil
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", usageErrorf("--%s-file: %v", what, err)
		}
		v := strings.TrimRight(string(b), "\r\n")
		switch what {
		case "private-key":
		case "clone-ssh-key", "clone-known-hosts":
			v += "\n" // ssh wants its files to end with a newline
		default:
			v = strings.TrimSpace(v)
		}
		if strings.TrimSpace(v) == "" {
			return "", usageErrorf("--%s-file %s is empty", what, file)
		}
		return v, nil
	}
	return "", nil
}

func newSourcesListCmd(e *env, cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List sources (secrets redacted)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			srcs, err := c.Sources(cmd.Context())
			if err != nil {
				return apiError(err)
			}
			if asJSON {
				return printJSON(e.stdout, srcs)
			}
			tw := newTable(e.stdout)
			fmt.Fprintln(tw, "NAME\tKIND\tWHERE\tBADGES\tCREATED")
			for _, s := range srcs {
				badges := "private"
				if s.PublicBadges {
					badges = "public"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Kind, or(where(s)), badges, ago(&s.CreatedAt))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// where is the address a source reads code from.
func where(s api.Source) string {
	switch {
	case s.Local != nil:
		return s.Local.Path
	case s.Generic != nil:
		return s.Generic.CloneURL
	case s.Gitea != nil:
		return s.Gitea.APIBase
	case s.GitHub != nil:
		return cmp(s.GitHub.APIBase, forge.DefaultGitHubAPI)
	}
	return ""
}

func newSourcesShowCmd(e *env, cf *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show NAME",
		Short: "Show a source's configuration (secrets redacted)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			s, err := c.Source(cmd.Context(), args[0])
			if err != nil {
				return apiError(err)
			}
			if !asJSON {
				fmt.Fprintf(e.stdout, "%s source %s (id %s), added %s\n", s.Kind, s.Name, s.ID, ago(&s.CreatedAt))
			}
			return printJSON(e.stdout, s)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print only JSON")
	return cmd
}

func newSourcesRemoveCmd(e *env, cf *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a source",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			if err := c.RemoveSource(cmd.Context(), args[0]); err != nil {
				return apiError(err)
			}
			fmt.Fprintf(e.stdout, "removed source %s\n", args[0])
			return nil
		},
	}
}

func newSourcesHookCmd(e *env, cf *clientFlags) *cobra.Command {
	var install, force bool
	var kilnPath string
	cmd := &cobra.Command{
		Use:   "hook NAME",
		Short: "Print, or install, the post-receive hook of a local source",
		Long: `hook prints the post-receive hook that makes every push to a local source's repository
run "kiln trigger". With --install it writes the hook into the repository (run it on the
server's host, where the repository is); a hook kiln did not write is left alone unless
--force.

The hook runs this kiln executable (or --kiln) and exports KILN_SERVER as this command's
server. When this command read its admin token from the file $KILN_TOKEN_FILE names, the
hook exports KILN_TOKEN_FILE too: keep that file readable only by the users who push. A
token itself is never written into the hook.`,
		Example: "  kiln sources hook app\n  KILN_TOKEN_FILE=/etc/kiln/push-token kiln sources hook app --install",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := cf.client(e)
			if err != nil {
				return err
			}
			if kilnPath == "" {
				if exe, err := os.Executable(); err == nil {
					kilnPath = exe
				}
			}
			q := api.HookQuery{Kiln: kilnPath, Server: cf.serverURL(e), TokenFile: cf.tokenPath(e)}
			hook, err := c.SourceHook(cmd.Context(), args[0], q)
			if err != nil {
				return apiError(err)
			}
			if q.TokenFile == "" {
				fmt.Fprintf(e.stderr, "note: the hook exports no token; pushers need %s or %s set\n", EnvToken, EnvTokenFile)
			}
			if !install {
				fmt.Fprint(e.stdout, hook.Script)
				return nil
			}
			cfg, err := api.HookConfigFor(hook.Source, q.Kiln, q.Server, q.TokenFile)
			if err != nil {
				return apiError(err)
			}
			src := forge.Source{Name: hook.Source, Kind: kiln.SourceLocal, Local: &forge.LocalConfig{Path: hook.Path}}
			path, err := forge.InstallHook(cmd.Context(), &src, cfg, force, forge.Options{})
			if err != nil {
				return apiError(err)
			}
			fmt.Fprintf(e.stdout, "installed %s\n", path)
			return nil
		},
	}
	cmd.Flags().BoolVar(&install, "install", false, "write the hook into the repository")
	cmd.Flags().BoolVar(&force, "force", false, "with --install: replace a hook kiln did not write")
	cmd.Flags().StringVar(&kilnPath, "kiln", "", "the kiln executable the hook runs (default: this one)")
	return cmd
}
